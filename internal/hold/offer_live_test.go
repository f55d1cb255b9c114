package hold_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// countingLoop is a node loop that scans the scratch tree when asked
// (Fresh) and counts the asks.
type countingLoop struct {
	mu    sync.Mutex // the scanner is one goroutine's at a time
	sc    *inventory.Scanner
	meta  *atomic.Pointer[metadata.Set]
	fresh atomic.Int64
}

func (l *countingLoop) Fresh(context.Context) (*inventory.Node, *metadata.Set, error) {
	l.fresh.Add(1)
	return l.scan()
}

func (l *countingLoop) scan() (*inventory.Node, *metadata.Set, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	meta := l.meta.Load()
	l.sc.Meta = meta
	n, err := l.sc.Scan(time.Now())
	return n, meta, err
}

func (l *countingLoop) Places() mounts.Places { return l.sc.Places }

// TestOfferedScansNeedNoScansOfTheirOwn: a holder the loop offers its
// scans to (the agent's) plans its resyncs and size changes from them.
// Over many resync periods with a scan offered every 100 ms it asks the
// loop for no scan after its first plan, and never reads the sizes
// itself (NoCheck: with the CRI every extra scan or read is a listing of
// the runtime); a size that changes in an offered scan is followed within
// a second. Before, each resync asked for a scan of its own (Fresh), and
// the size check read the pod source every interval: fix mode at
// 1.2–1.5× observe-only in the lane.
func TestOfferedScansNeedNoScansOfTheirOwn(t *testing.T) {
	s := realtest.NewScratch(t)
	tree := realtest.NewVMTree(s, 500, 1000, 2000, 4000)
	var meta atomic.Pointer[metadata.Set]
	meta.Store(metadata.NewSet(tree.Pods()))
	sc, err := inventory.Open(s.Host)
	if err != nil {
		t.Fatal(err)
	}
	sc.Base = s.Name
	loop := &countingLoop{sc: sc, meta: &meta}
	var reads atomic.Int64
	engine := &fix.Engine{FS: s.Host, Base: s.Name, JournalDir: t.TempDir()}
	const resync = 300 * time.Millisecond
	h, err := hold.New(hold.Config{Host: s.Host, Engine: engine, MaxTierMilliCPU: capMilli, Loop: loop, Offered: true,
		Check: hold.NoCheck, Resync: resync,
		Sizes: func(context.Context) (*metadata.Set, error) { reads.Add(1); return meta.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := h.Run(ctx); err != nil {
			t.Errorf("holder: %v", err)
		}
	}()
	defer func() { cancel(); <-done }()
	// The loop: a scan offered every 100 ms, from the first plan's on.
	offering, stopOffering := context.WithCancel(ctx)
	offered := make(chan struct{})
	go func() {
		defer close(offered)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-offering.Done():
				return
			case <-tick.C:
			}
			if loop.fresh.Load() == 0 {
				continue // the first plan's scan first
			}
			n, m, err := loop.scan()
			if err != nil {
				t.Errorf("scan: %v", err)
				return
			}
			h.Offer(n, m)
		}
	}()
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
		for !cond() {
			if time.Since(from) > limit {
				t.Fatalf("%s: not within %v", what, limit)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("%s in %v", what, time.Since(from).Round(time.Millisecond))
	}
	waitFor("the first plan", 10*time.Second, func() bool { return h.Ready() && tree.Weight(tier) == tierTarget(1000, 2000, 4000) })

	// Ten resync periods: each plans from an offered scan.
	time.Sleep(10 * resync)
	pods := tree.Pods()
	pods[2].Annotation[vmsize.AnnotationCPU] = "2"
	meta.Store(metadata.NewSet(pods))
	waitFor("following a size changed in an offered scan", time.Second, func() bool {
		return tree.Weight(tree.VMs[2].Rel) == tree.PodWeight(fairness.MilliCPUToShares(2000)) &&
			tree.Weight(tier) == tierTarget(1000, 2000, 2000)
	})
	stopOffering()
	<-offered
	if n := loop.fresh.Load(); n != 1 {
		t.Errorf("the holder asked the loop for %d scans, want 1 (its first plan): resyncs and size changes must plan from the offered scans", n)
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("the holder read the pod sizes %d times itself with NoCheck, want 0: they come with the offered scans", n)
	}
}

// TestOfferedNeedsALoop: Offered without the Loop that offers is refused
// (nothing would ever be offered: the holder would never resync).
func TestOfferedNeedsALoop(t *testing.T) {
	_, err := hold.New(hold.Config{Host: &cgroupfs.Host{}, Engine: &fix.Engine{}, Offered: true,
		Sizes: func(context.Context) (*metadata.Set, error) { return metadata.NewSet(nil), nil }})
	if err == nil || !strings.Contains(err.Error(), "Offered needs the Loop") {
		t.Fatalf("hold.New with Offered and no Loop: %v, want the refusal", err)
	}
}
