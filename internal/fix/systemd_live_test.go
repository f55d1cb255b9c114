package fix

import (
	"os"
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/kubelettree"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

// TestSystemdWeightsThroughUnits is seed 000's weights on a node whose
// kubelet uses the systemd driver, under a real systemd (the systemd
// guest): two BestEffort VM pods of 1 and 4 CPUs, their slices and
// container scopes made the way the kubelet and runc make them, every
// weight at the kubelet's 1. `fix --apply` must set every weight as a unit
// property through systemd, so that it survives daemon-reload (a weight
// written into the file is reset by it: docs/systemd.md); the journal
// names each unit, property and old value; revert restores them.
func TestSystemdWeightsThroughUnits(t *testing.T) {
	tree := realtest.NewSystemdTree(t)
	type vm struct {
		pod          kubelettree.Pod
		slice, scope string
		podCg, ctrCg string
	}
	var vms []vm
	var pods []kubelettree.Pod
	for i, milli := range []int64{1000, 4000} {
		p := kubelettree.Pod{Name: "vm-" + strconv.Itoa(i+1), UID: kubelettree.RandUID(), QoS: layout.BestEffort, MilliCPU: milli,
			ContainerID: strings.Repeat(strconv.Itoa(i+1), 64)}
		slice := tree.PodSlice(p.UID)
		scope, _ := tree.Scope(slice, p.ContainerID)
		vms = append(vms, vm{pod: p, slice: slice, scope: scope, podCg: tree.CgroupOf(slice), ctrCg: tree.CgroupOf(scope)})
		pods = append(pods, p)
	}
	host, err := cgroupfs.OpenHost("/")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	bus, err := systemd.Open(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	e := &Engine{FS: host, Base: tree.Root(), JournalDir: t.TempDir(), Meta: metadata.NewSet(kubelettree.Metadata("default", pods)), Units: bus}
	defer e.Close()

	weight := func(cg string) string {
		t.Helper()
		b, err := os.ReadFile(path.Join("/sys/fs/cgroup", cg, "cpu.weight"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	want := map[string]uint64{tree.Tier(): fairness.SharesToWeightLinear(2 + fairness.MilliCPUToShares(1000) + fairness.MilliCPUToShares(4000))}
	cgOf := map[string]string{tree.Tier(): tree.CgroupOf(tree.Tier())}
	for _, v := range vms {
		w := fairness.SharesToWeightLinear(fairness.MilliCPUToShares(v.pod.MilliCPU))
		want[v.slice], want[v.scope] = w, w
		cgOf[v.slice], cgOf[v.scope] = v.podCg, v.ctrCg
	}
	for u, cg := range cgOf {
		if got := weight(cg); got != "1" {
			t.Fatalf("before: %s cpu.weight %s, want the kubelet's 1", u, got)
		}
	}

	opts := Options{MaxTierMilliCPU: 5000}
	res, err := e.Apply(opts)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if len(res.Steps) != len(want) {
		t.Fatalf("applied %d steps, want %d (2 pods, 2 containers, the tier): %+v", len(res.Steps), len(want), res.Steps)
	}
	for _, s := range res.Steps {
		if s.Op.Kind != plan.Property || s.Op.Property != systemd.CPUWeight {
			t.Errorf("step %s on %s: want a CPUWeight property set through systemd", s.Op.Kind, s.Op.Path)
		}
	}
	check := func(when string) {
		t.Helper()
		for u, w := range want {
			if got := weight(cgOf[u]); got != strconv.FormatUint(w, 10) {
				t.Errorf("%s: %s cpu.weight %s, want %d", when, u, got, w)
			}
			if got, err := bus.Property(u, systemd.CPUWeight); err != nil || got != w {
				t.Errorf("%s: systemd's %s CPUWeight %d (%v), want %d", when, u, got, err, w)
			}
		}
	}
	check("after apply")
	// One daemon-reload is enough to reset a direct write (docs/systemd.md);
	// the holder's test does five. Each costs 10-40 s under TCG.
	tree.Reload()
	check("after daemon-reload")
	// A new container in a sized pod makes systemd realize the slice
	// again.
	tree.Scope(vms[0].slice, strings.Repeat("e", 64))
	check("after a new scope in a pod slice")
	if p, _, err := e.Plan(opts); err != nil || len(p.Ops) != 0 {
		t.Errorf("a second plan after apply: %d operations (%v), want none", len(p.Ops), err)
	}

	// The journal names each unit, its property and the value it had.
	entries, err := e.JournalEntries()
	if err != nil {
		t.Fatal(err)
	}
	intents := 0
	for _, en := range entries {
		if en.Type != journal.Intent {
			continue
		}
		intents++
		if en.Op.Unit == "" || en.Op.Property != systemd.CPUWeight || en.Prev == nil || en.Prev.Value == nil || *en.Prev.Value != "1" {
			t.Errorf("journal intent %+v: want the unit, CPUWeight and its old value 1", en)
		}
	}
	if intents != len(want) {
		t.Errorf("journal has %d intents, want %d", intents, len(want))
	}

	rep, err := e.Revert(false)
	if err != nil {
		t.Fatalf("revert: %v", err)
	}
	if len(rep.Failed()) > 0 {
		t.Fatalf("revert failed: %+v", rep.Failed())
	}
	tree.Reload()
	for u, cg := range cgOf {
		if got := weight(cg); got != "1" {
			t.Errorf("after revert and daemon-reload: %s cpu.weight %s, want 1", u, got)
		}
		if got, err := bus.Property(u, systemd.CPUWeight); err != nil || got != 1 {
			t.Errorf("after revert: systemd's %s CPUWeight %d (%v), want 1", u, got, err)
		}
	}
}
