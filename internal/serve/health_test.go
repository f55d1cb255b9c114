package serve

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// stallSampler is the test hook that stalls the scan loop: scans
// numbered from stallAt on block in Sample (as a read hung in the kernel
// would) until the test releases them; entered says a scan is blocked.
type stallSampler struct {
	*seedSampler
	stallAt int64
	entered chan struct{}
	release chan struct{}
}

func (s *stallSampler) Sample(now time.Time, meta *metadata.Set) (Scan, error) {
	if s.scans.Load()+1 >= s.stallAt {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.seedSampler.Sample(now, meta)
}

// runLoop runs s's scan loop until the test ends.
func runLoop(t *testing.T, s *Server) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// probes are the status codes of /healthz and /readyz.
func probeCodes(t *testing.T, h http.Handler) (live, ready int) {
	t.Helper()
	live, _, _ = get(t, h, "/healthz")
	ready, _, _ = get(t, h, "/readyz")
	return live, ready
}

// A scan loop stuck in its first scan: not ready; alive for 3 intervals,
// then /healthz fails (the kubelet restarts the agent); once the scan
// completes, both recover.
func TestHealthFirstScanStuck(t *testing.T) {
	clock := newFakeClock()
	smp := &stallSampler{seedSampler: newSeedSampler(t), stallAt: 1, entered: make(chan struct{}, 10), release: make(chan struct{})}
	s := New(Config{Interval: 10 * time.Second, Sampler: smp, Clock: clock})
	h := s.Handler()
	runLoop(t, s)
	<-smp.entered
	for _, c := range []struct {
		advance     time.Duration
		live, ready int
	}{
		{0, 200, 503},
		{30 * time.Second, 200, 503},
		{time.Second, 503, 503},
	} {
		clock.Advance(c.advance)
		if live, ready := probeCodes(t, h); live != c.live || ready != c.ready {
			t.Errorf("at %s: /healthz %d /readyz %d, want %d %d", clock.Now().Format(time.TimeOnly), live, ready, c.live, c.ready)
		}
	}
	if _, body, _ := get(t, h, "/healthz"); !strings.Contains(body, "no scan for 31s (over 3 intervals of 10s)") {
		t.Errorf("/healthz says %q", body)
	}
	smp.stallAt = 1 << 62
	close(smp.release)
	clock.waitIdle(t)
	if live, ready := probeCodes(t, h); live != 200 || ready != 200 {
		t.Errorf("after the scan: /healthz %d /readyz %d, want 200 200", live, ready)
	}
}

// A scan loop that ran well, then stalled: ready until the last good scan
// is over 2 intervals old, alive until no scan completed for over 3.
func TestHealthLoopStalls(t *testing.T) {
	clock := newFakeClock()
	smp := &stallSampler{seedSampler: newSeedSampler(t), stallAt: 3, entered: make(chan struct{}, 10), release: make(chan struct{})}
	s := New(Config{Interval: 10 * time.Second, Sampler: smp, Clock: clock})
	h := s.Handler()
	runLoop(t, s)
	clock.waitIdle(t) // scan 1 done
	if live, ready := probeCodes(t, h); live != 200 || ready != 200 {
		t.Fatalf("after a scan: /healthz %d /readyz %d", live, ready)
	}
	clock.Advance(10 * time.Second)
	clock.waitIdle(t) // scan 2 done: the last good scan
	clock.Advance(10 * time.Second)
	<-smp.entered // scan 3 stuck
	for _, c := range []struct {
		advance     time.Duration
		live, ready int
	}{
		{0, 200, 200},                // 10 s since the last scan
		{10 * time.Second, 200, 200}, // 20 s: 2 intervals
		{time.Second, 200, 503},      // 21 s: stale
		{9 * time.Second, 200, 503},  // 30 s: 3 intervals
		{time.Millisecond, 503, 503}, // stuck
		{time.Hour, 503, 503},        // and stays so
	} {
		clock.Advance(c.advance)
		if live, ready := probeCodes(t, h); live != c.live || ready != c.ready {
			t.Errorf("+%s: /healthz %d /readyz %d, want %d %d", clock.Now().Sub(newFakeClock().now), live, ready, c.live, c.ready)
		}
	}
	smp.stallAt = 1 << 62
	close(smp.release)
	clock.waitIdle(t)
	if live, ready := probeCodes(t, h); live != 200 || ready != 200 {
		t.Errorf("after the stuck scan completed: /healthz %d /readyz %d, want 200 200", live, ready)
	}
}

// Scans that fail keep the loop alive (a restart would not help, and the
// figures say resource_scrape_error) but make it unready once the last
// good scan is over 2 intervals old.
func TestHealthFailingScans(t *testing.T) {
	clock := newFakeClock()
	smp := newSeedSampler(t)
	s := New(Config{Interval: 10 * time.Second, Sampler: smp, Clock: clock})
	h := s.Handler()
	runLoop(t, s)
	clock.waitIdle(t)
	smp.fail.Store(true)
	want := []int{200, 200, 503, 503, 503, 503}
	for i, w := range want {
		clock.Advance(10 * time.Second)
		clock.waitIdle(t)
		live, ready := probeCodes(t, h)
		if live != 200 || ready != w {
			t.Errorf("%d failed scans: /healthz %d /readyz %d, want 200 %d", i+1, live, ready, w)
		}
	}
	smp.fail.Store(false)
	clock.Advance(10 * time.Second)
	clock.waitIdle(t)
	if _, ready := probeCodes(t, h); ready != 200 {
		t.Errorf("after a good scan: /readyz %d", ready)
	}
}

// A snapshot is fed once and no loop runs: it never goes stale.
func TestHealthSnapshotNeverStale(t *testing.T) {
	clock := newFakeClock()
	s := New(Config{Interval: 10 * time.Second, Sampler: newSeedSampler(t), Clock: clock})
	if err := s.ScanOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(24 * time.Hour)
	if live, ready := probeCodes(t, s.Handler()); live != 200 || ready != 200 {
		t.Errorf("a day later: /healthz %d /readyz %d", live, ready)
	}
}
