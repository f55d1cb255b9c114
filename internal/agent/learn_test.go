package agent

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/nriplugin"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// An adoption that moved a misplaced container teaches `cgwarden nri` its
// pod's runtime handler (from the CRI metadata of the run); a step not
// applied, another rule's step, a pod of the default handler and a move
// out of a cgroup that is not the runtime-literal "<slice>:<prefix>:<id>"
// teach nothing.
func TestAdoptionLearnsHandlers(t *testing.T) {
	path := filepath.Join(t.TempDir(), nriplugin.LearnedFile)
	e := &fix.Engine{Meta: metadata.NewSet([]metadata.Pod{
		{UID: "u-spin", RuntimeHandler: "wasmtime-spin-v2"},
		{UID: "u-runc"},
		{UID: "u-kata", RuntimeHandler: "kata"},
	})}
	learn := learnHandlers(path, e, slog.New(slog.NewTextHandler(io.Discard, nil)))
	id := strings.Repeat("ab", 32)
	literal := "/sys/fs/cgroup/cpu/kubepods-besteffort-pod1.slice:cri-containerd:" + id
	move := func(uid string) plan.Op {
		return plan.Op{Kind: plan.Move, Rule: rules.MisplacedContainer, Pod: uid, Pairs: []plan.Pair{{Source: literal, Target: "/t"}}}
	}
	// A pod-named cgroup away from its pod is not the runtime-literal
	// shape: placing cgroupsPath would not cure it, nothing is learned.
	podNamed := plan.Op{Kind: plan.Move, Rule: rules.MisplacedContainer, Pod: "u-kata",
		Pairs: []plan.Pair{{Source: "/sys/fs/cgroup/cpu/pod11111111-2222-3333-4444-555555555555-" + id, Target: "/t"}}}
	learn(&fix.Result{Steps: []fix.StepResult{
		{Op: move("u-spin")},
		{Op: podNamed},
		{Op: move("u-runc")},
		{Op: move("u-kata"), Note: "not applied: the pod is gone"},
		{Op: plan.Op{Kind: plan.Write, Rule: rules.MisplacedContainer, Pod: "u-kata"}},
	}})
	learn(&fix.Result{Steps: []fix.StepResult{{Op: move("u-spin")}}})
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := nriplugin.ParseLearned(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Handler != "wasmtime-spin-v2" {
		t.Fatalf("learned %+v, want only the misplacing pod's handler", got)
	}
}
