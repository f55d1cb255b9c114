package hold_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// TestOfferedScansNeedNoScansOfTheirOwn: the agent's holder plans its
// resyncs and size changes from the scans the node loop offers it (one
// every 200 ms here). Through a resync period (6 intervals, at least
// 6 s) it asks the loop for no scan after its first plan
// (cgwarden_weight_fresh_scans_total stays 1), and with a pod source that
// notifies (NoCheck) it never reads the sizes itself: the pods are listed
// once per scan of the loop (cgwarden_scans_total), no more (with the CRI
// every extra scan or read is a listing of the runtime). A size that
// changes, without a notification, is followed within a second from the
// offered scans. Before, each resync asked for a scan of its own (Fresh),
// and the size check read the pod source every interval: fix mode at
// 1.2–1.5× observe-only in the lane.
func TestOfferedScansNeedNoScansOfTheirOwn(t *testing.T) {
	s := realtest.NewScratch(t)
	tree := realtest.NewVMTree(s, 500, 1000, 2000, 4000)
	lister := &pods{}
	lister.set(tree.Pods())
	o := fixOptions(s.Name, notifyingPods{lister, metadata.NewChanges()}, t.TempDir(), weightRules...)
	o.MaxTierCPU, o.Interval = "7", 200*time.Millisecond
	a, halt := startAgent(t, o)
	tier := realtest.Kube + "/besteffort"
	tierTarget := func(sizes ...int64) uint64 {
		var sum uint64 = fairness.MinShares
		for _, m := range sizes {
			sum += fairness.MilliCPUToShares(m)
		}
		return tree.PodWeight(sum)
	}
	waitFor := func(what string, limit time.Duration, cond func() bool) {
		t.Helper()
		from := time.Now()
		poll.Every(5*time.Millisecond).UntilTrue(t, limit, what, cond)
		t.Logf("%s in %v", what, time.Since(from).Round(time.Millisecond))
	}
	replans := func() float64 { v, _ := metric(t, a, "cgwarden_weight_replans_total", nil); return v }
	waitFor("the first plan", 10*time.Second, func() bool { return planned(t, a) && tree.Weight(tier) == tierTarget(1000, 2000, 4000) })

	// A resync (nothing changed): planned from an offered scan.
	first := replans()
	waitFor("a resync", 15*time.Second, func() bool { return replans() > first })
	pods := tree.Pods()
	pods[2].Annotation[vmsize.AnnotationCPU] = "2"
	lister.set(pods)
	waitFor("following a size changed in an offered scan", time.Second, func() bool {
		return tree.Weight(tree.VMs[2].Rel) == tree.PodWeight(fairness.MilliCPUToShares(2000)) &&
			tree.Weight(tier) == tierTarget(1000, 2000, 2000)
	})
	halt()
	if n, _ := metric(t, a, "cgwarden_weight_fresh_scans_total", nil); n != 1 {
		t.Errorf("the holder asked the loop for %v scans, want 1 (its first plan): resyncs and size changes must plan from the offered scans", n)
	}
	scans, _ := metric(t, a, "cgwarden_scans_total", nil)
	if n := lister.listings(); float64(n) != scans {
		t.Errorf("the pods were listed %d times for %v scans of the loop: the holder read the sizes itself with NoCheck, want once per scan", n, scans)
	}
}

// TestNewNeedsTheLoop: a holder is made for a node loop, its watch and
// its applier; without any of them it is refused.
func TestNewNeedsTheLoop(t *testing.T) {
	_, err := hold.New(hold.Config{Host: &cgroupfs.Host{}, Engine: &fix.Engine{},
		Sizes: func(context.Context) (*metadata.Set, error) { return metadata.NewSet(nil), nil }})
	if err == nil || !strings.Contains(err.Error(), "Loop, Watch and Apply are required") {
		t.Fatalf("hold.New without a Loop, Watch and Apply: %v, want the refusal", err)
	}
}
