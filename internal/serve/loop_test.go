package serve

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// fakeClock moves only when the test says so; every After registers a
// waiter the test can wait for, which is how it knows the loop is idle.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	waiting chan struct{}
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), waiting: make(chan struct{}, 100)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, waiter{c.now.Add(d), ch})
	c.waiting <- struct{}{}
	return ch
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

func (c *fakeClock) waitIdle(t *testing.T) {
	t.Helper()
	select {
	case <-c.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the scan loop never went back to waiting")
	}
}

// seedSampler scans the seed-003 snapshot's first sample at whatever time
// it is asked, counting scans; fail makes the next scans fail.
type seedSampler struct {
	fs    *snapshot.Snapshot
	scans atomic.Int64
	fail  atomic.Bool
}

func newSeedSampler(t *testing.T) *seedSampler {
	b, _ := examples.Open("seed-003-k3s-spin")
	s, err := snapshot.Load(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return &seedSampler{fs: s}
}

func (s *seedSampler) Sample(now time.Time, meta *metadata.Set) (Scan, error) {
	s.scans.Add(1)
	if s.fail.Load() {
		return Scan{}, errors.New("listing the cgroup tree: permission denied")
	}
	sc, err := inventory.Open(s.fs.Samples[0].FS)
	if err != nil {
		return Scan{}, err
	}
	return (&ScannerSampler{Scanner: sc}).Sample(now, meta)
}

func TestOneScanPerIntervalWhateverTheRequests(t *testing.T) {
	clock := newFakeClock()
	smp := newSeedSampler(t)
	s := New(Config{Interval: 10 * time.Second, Sampler: smp, Clock: clock})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	h := s.Handler()
	for tick := 1; tick <= 5; tick++ {
		clock.waitIdle(t)
		if got := smp.scans.Load(); got != int64(tick) {
			t.Fatalf("after %d ticks: %d scans", tick-1, got)
		}
		// Many concurrent requests between two ticks trigger no scan.
		var wg sync.WaitGroup
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, p := range []string{"/metrics/resource", "/stats/summary", "/metrics"} {
					if code, _, _ := get(t, h, p); code != http.StatusOK {
						t.Errorf("%s: %d", p, code)
					}
				}
			}()
		}
		wg.Wait()
		if got := smp.scans.Load(); got != int64(tick) {
			t.Fatalf("requests triggered scans: %d after %d ticks", got, tick-1)
		}
		clock.Advance(10 * time.Second)
	}
}

func TestOverrunningScanDoesNotPileUp(t *testing.T) {
	cases := []struct {
		name      string
		overruns  []time.Duration // how long the first scans take
		scans     int64           // scans before the loop first waits
		firstWait time.Duration
	}{
		{"a 4 s scan is followed by the 6 s left of the interval", []time.Duration{4 * time.Second}, 1, 6 * time.Second},
		{"a 25 s scan is followed at once by one scan, not by the two missed", []time.Duration{25 * time.Second}, 2, 10 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			smp := &timedSampler{seedSampler: newSeedSampler(t), clock: clock, overruns: tc.overruns}
			s := New(Config{Interval: 10 * time.Second, Sampler: smp, Clock: clock})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			clock.waitIdle(t)
			if got := smp.scans.Load(); got != tc.scans {
				t.Errorf("%d scans before the first wait, want %d", got, tc.scans)
			}
			clock.mu.Lock()
			wait := clock.waiters[0].at.Sub(clock.now)
			clock.mu.Unlock()
			if wait != tc.firstWait {
				t.Errorf("first wait %s, want %s", wait, tc.firstWait)
			}
		})
	}
}

// timedSampler makes its first scans take the given times on the clock.
type timedSampler struct {
	*seedSampler
	clock    *fakeClock
	overruns []time.Duration
	n        int
}

func (s *timedSampler) Sample(now time.Time, meta *metadata.Set) (Scan, error) {
	if s.n < len(s.overruns) {
		s.clock.Advance(s.overruns[s.n])
	}
	s.n++
	return s.seedSampler.Sample(now, meta)
}

func TestFailedScanKeepsServingAndFlagsTheError(t *testing.T) {
	smp := newSeedSampler(t)
	s := New(Config{Sampler: smp, Clock: newFakeClock()})
	if err := s.ScanOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	_, before, _ := get(t, h, "/metrics/resource")
	if !strings.Contains(before, "resource_scrape_error 0") {
		t.Fatalf("no resource_scrape_error 0:\n%s", before)
	}
	smp.fail.Store(true)
	if err := s.ScanOnce(context.Background()); err == nil {
		t.Fatal("failed scan reported no error")
	}
	_, after, _ := get(t, h, "/metrics/resource")
	if !strings.Contains(after, "resource_scrape_error 1") || !strings.Contains(after, "node_cpu_usage_seconds_total 9000 ") {
		t.Errorf("after a failed scan:\n%s", after)
	}
	_, own, _ := get(t, h, "/metrics")
	for _, want := range []string{"cgwarden_scan_failures_total 1", "cgwarden_scans_total 2", "cgwarden_last_scan_failed 1"} {
		if !strings.Contains(own, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// flakyLister names the seed's pod once, then fails.
type flakyLister struct{ calls atomic.Int64 }

func (f *flakyLister) Pods(context.Context) ([]metadata.Pod, error) {
	if f.calls.Add(1) > 1 {
		return nil, errors.New("CRI /run/containerd/containerd.sock: connection refused")
	}
	return []metadata.Pod{{UID: seedPod, Name: "spin-test", Namespace: "default"}}, nil
}

func TestMetadataFailureKeepsLastNames(t *testing.T) {
	s := New(Config{Sampler: newSeedSampler(t), Lister: &flakyLister{}, Clock: newFakeClock()})
	h := s.Handler()
	for i := 0; i < 3; i++ {
		if err := s.ScanOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, res, _ := get(t, h, "/metrics/resource")
		if !strings.Contains(res, `pod_cpu_usage_seconds_total{namespace="default",pod="spin-test"}`) {
			t.Fatalf("scan %d: the pod lost its name:\n%s", i, res)
		}
	}
	_, own, _ := get(t, h, "/metrics")
	if !strings.Contains(own, "cgwarden_metadata_failures_total 2") {
		t.Errorf("metadata failures not counted")
	}
}
