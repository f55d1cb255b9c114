//go:build failpoints

package hold_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/agent"
	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// The test binary re-executed as a weight holder on a scratch tree
// (failpoints armed by CGWARDEN_FAILPOINTS in its environment).
const (
	envHolder  = "CGWARDEN_HOLD_TEST_HOLDER" // the scratch's name
	envJournal = "CGWARDEN_HOLD_TEST_JOURNAL"
	envMeta    = "CGWARDEN_HOLD_TEST_META"
)

func TestMain(m *testing.M) {
	if os.Getenv(envHolder) != "" {
		os.Exit(holderChild())
	}
	os.Exit(m.Run())
}

// holderChild runs `serve --fix` (the agent) holding the weights of the
// scratch tree until it is killed.
func holderChild() int {
	raw, err := os.ReadFile(os.Getenv(envMeta))
	var list []metadata.Pod
	if err == nil {
		err = json.Unmarshal(raw, &list)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	lister := &pods{}
	lister.set(list)
	o := fixOptions(os.Getenv(envHolder), lister, os.Getenv(envJournal), weightRules...)
	o.MaxTierCPU, o.SizeCheck = strconv.Itoa(capMilli)+"m", 100*time.Millisecond
	o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg, err := o.Config()
	if err == nil {
		var a *agent.Agent
		if a, err = cfg.Complete(context.Background()); err == nil {
			err = a.Run(context.Background())
		}
	}
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// TestHolderKilledAfterARestore: the agent's holder restores the tier's
// weight after the kubelet reset it and is SIGKILLed right after the write
// (hold/after-restore). The weight stays at its target, the journal reads
// back with nothing in doubt and did not grow for the restore, and a
// revert still brings every value back to the kubelet's.
func TestHolderKilledAfterARestore(t *testing.T) {
	s := realtest.NewScratch(t)
	tree := realtest.NewVMTree(s, 500, 1000, 2000, 4000)
	dir := t.TempDir()
	metaFile := filepath.Join(dir, "pods.json")
	b, err := json.Marshal(tree.Pods())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(metaFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	jdir := filepath.Join(dir, "journal")
	tier := realtest.Kube + "/besteffort"
	minimum := tree.Weight(tier)
	before := map[string]uint64{tier: minimum}
	for _, vm := range tree.VMs {
		before[vm.Rel], before[vm.CtrRel] = tree.Weight(vm.Rel), tree.Weight(vm.CtrRel)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHolder+"="+s.Name, envJournal+"="+jdir,
		envMeta+"="+metaFile, "CGWARDEN_FAILPOINTS=hold/after-restore=kill")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	target := tree.PodWeight(fairness.MinShares + fairness.MilliCPUToShares(1000) + fairness.MilliCPUToShares(2000) + fairness.MilliCPUToShares(4000))
	// The first plan applied and its run closed in the journal.
	poll.Every(10*time.Millisecond).Until(t, 30*time.Second, fmt.Sprintf("the holder setting the tier to %d, its run closed in the journal", target), func() (bool, string, error) {
		e := journalEntries(t, jdir)
		w := tree.Weight(tier)
		return w == target && len(e) > 0 && e[len(e)-1].Type == journal.End, fmt.Sprintf("the tier at %d: %s", w, stderr.String()), nil
	})
	lines := len(journalEntries(t, jdir))
	s.Write(tier, tree.WeightFile(), strconv.FormatUint(minimum, 10)) // the kubelet's reset
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the holder was not killed at hold/after-restore within 30s: %s", stderr.String())
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL ||
		!strings.Contains(stderr.String(), "cgwarden failpoint hold/after-restore: kill") {
		t.Fatalf("the holder ended with %v, not at hold/after-restore: %s", cmd.ProcessState, stderr.String())
	}
	if got := tree.Weight(tier); got != target {
		t.Errorf("after the holder died the tier weighs %d, want the target %d it wrote", got, target)
	}
	entries := journalEntries(t, jdir)
	if len(entries) != lines {
		t.Errorf("the journal went from %d to %d entries for a restore", lines, len(entries))
	}
	for _, r := range journal.Applies(entries) {
		for _, st := range r.Steps {
			if st.Status == journal.StatusInDoubt {
				t.Errorf("step %d (%s %s) in doubt after the kill", st.Seq, st.Op.Kind, st.Op.Path)
			}
		}
	}
	e := &fix.Engine{FS: s.Host, Base: s.Name, JournalDir: jdir}
	defer e.Close()
	rep, err := e.Revert(true)
	if err != nil || len(rep.Failed()) > 0 {
		t.Fatalf("revert: %v %+v", err, rep)
	}
	for rel, want := range before {
		if got := tree.Weight(rel); got != want {
			t.Errorf("after revert %s weighs %d, the kubelet had %d", rel, got, want)
		}
	}
}
