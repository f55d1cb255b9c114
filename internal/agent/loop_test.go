package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/serve"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// The node loop's tests: the loop and a serve.Server wired as
// completeLive wires them (the Server's Findings and the loop's audit,
// one Interval), on one fake clock, scanning the first sample of the
// seed-003 snapshot (a k3s node, cgroup v1). What they check is what the
// kubelet's probes and Prometheus see: /healthz, /readyz, /metrics and
// /metrics/resource.

const (
	loopInterval = 10 * time.Second
	// seedPod is the seed-003 snapshot's SpinKube pod.
	seedPod = "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c"
)

// loopClock is a fake clock that says when the loop waits: every timer
// it makes is sent on waits, which is how a test knows that the loop has
// finished its scans and is idle until the clock moves.
type loopClock struct {
	*testingclock.FakeClock
	waits chan time.Duration
}

func (c *loopClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.waits <- d
	return t
}

var _ clock.Clock = (*loopClock)(nil)

// seedFS is the seed's first sample with the test's hands on the reads:
// hook, when set, runs at each scan's last read (/proc/meminfo): a scan
// that takes time on the fake clock, or one stuck in the kernel; fail
// makes every listing fail, as an unreadable hierarchy does (the scan
// fails as a whole).
type seedFS struct {
	cgroupfs.FS
	fail atomic.Bool
	hook atomic.Pointer[func()]
}

func (f *seedFS) ReadDirs(path string) ([]string, error) {
	if f.fail.Load() {
		return nil, &fs.PathError{Op: "openat2", Path: path, Err: fs.ErrPermission}
	}
	return f.FS.ReadDirs(path)
}

func (f *seedFS) ReadFile(path string) ([]byte, error) {
	if h := f.hook.Load(); h != nil && path == inventory.MeminfoPath {
		(*h)()
	}
	return f.FS.ReadFile(path)
}

// slow makes the next scans take the given times on c, one each.
func (f *seedFS) slow(c *loopClock, took ...time.Duration) {
	var n atomic.Int64
	h := func() {
		if i := n.Add(1) - 1; i < int64(len(took)) {
			c.Step(took[i])
		}
	}
	f.hook.Store(&h)
}

// stall makes the next scan block at its last read until release;
// entered says it is blocked. Scans after it run through.
func (f *seedFS) stall() (entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}, 1), make(chan struct{})
	h := func() {
		in <- struct{}{}
		<-out
	}
	f.hook.Store(&h)
	return in, func() { f.hook.Store(nil); close(out) }
}

// loopRig is a node loop feeding a Server, not yet running.
type loopRig struct {
	clock *loopClock
	start time.Time
	fs    *seedFS
	srv   *serve.Server
	h     http.Handler
	loop  *Loop
	logs  *realtest.LockedBuffer
	// scans counts the scans begun (the metadata is read once each).
	scans atomic.Int64
	// metaErr, when set, is the metadata source's answer; else it names
	// the seed's pod podName.
	metaErr atomic.Pointer[error]
	podName atomic.Pointer[string]
}

func newLoopRig(t *testing.T) *loopRig {
	t.Helper()
	b, ok := examples.Open("seed-003-k3s-spin")
	if !ok {
		t.Fatal("no embedded seed-003-k3s-spin")
	}
	snap, err := snapshot.Load(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	r := &loopRig{start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), fs: &seedFS{FS: snap.Samples[0].FS}, logs: &realtest.LockedBuffer{}}
	r.clock = &loopClock{FakeClock: testingclock.NewFakeClock(r.start), waits: make(chan time.Duration, 100)}
	sc, err := inventory.Open(r.fs)
	if err != nil {
		t.Fatal(err)
	}
	sc.ProcsWhereUsed = true // as completeLive sets it
	log := slog.New(slog.NewTextHandler(r.logs, nil))
	r.srv = serve.New(serve.Config{NodeName: "k3s-node", Interval: loopInterval, Clock: r.clock, Logger: log, Findings: true})
	r.h = r.srv.Handler()
	name := "spin-test"
	r.podName.Store(&name)
	r.loop = NewLoop(sc, r.meta, audit.Policy{}, r.srv, loopInterval, false, log)
	r.loop.clock = r.clock
	return r
}

// meta is the loop's metadata source.
func (r *loopRig) meta(context.Context) (*metadata.Set, error) {
	r.scans.Add(1)
	if err := r.metaErr.Load(); err != nil {
		return nil, *err
	}
	return metadata.NewSet([]metadata.Pod{{UID: seedPod, Name: *r.podName.Load(), Namespace: "default"}}), nil
}

// failMeta makes the metadata source fail (err) or answer again (nil).
func (r *loopRig) failMeta(err error) {
	if err == nil {
		r.metaErr.Store(nil)
		return
	}
	r.metaErr.Store(&err)
}

// run runs the loop until the test ends.
func (r *loopRig) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.loop.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// idle waits until the loop waits for its next tick, and returns how long
// that wait is.
func (r *loopRig) idle(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-r.clock.waits:
		return d
	case <-time.After(30 * time.Second):
		t.Fatal("the loop never went back to waiting for its next tick")
		return 0
	}
}

// tick moves the clock to the loop's next tick and waits for the scan.
func (r *loopRig) tick(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	r.clock.Step(d)
	return r.idle(t)
}

func (r *loopRig) get(t *testing.T, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	r.h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Code, rec.Body.String()
}

// probes are the status codes of /healthz and /readyz.
func (r *loopRig) probes(t *testing.T) (live, ready int) {
	t.Helper()
	live, _ = r.get(t, "/healthz")
	ready, _ = r.get(t, "/readyz")
	return live, ready
}

// since is the fake clock's time since the rig began, for messages.
func (r *loopRig) since() time.Duration { return r.clock.Since(r.start) }

// metricLine is the line of /metrics/resource or /metrics that begins
// with prefix ("" when none does).
func metricLine(body, prefix string) string {
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// One scan per interval, however many requests come between two: a
// request never scans.
func TestLoopScansOncePerIntervalWhateverTheRequests(t *testing.T) {
	r := newLoopRig(t)
	r.run(t)
	wait := r.idle(t)
	for tick := int64(1); tick <= 5; tick++ {
		if wait != loopInterval {
			t.Fatalf("after scan %d the loop waits %s, want %s", tick, wait, loopInterval)
		}
		if got := r.scans.Load(); got != tick {
			t.Fatalf("after %d ticks: %d scans", tick-1, got)
		}
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				for _, p := range []string{"/metrics/resource", "/stats/summary", "/metrics", "/audit", "/readyz"} {
					if code, _ := r.get(t, p); code != http.StatusOK {
						t.Errorf("%s: %d", p, code)
					}
				}
			})
		}
		wg.Wait()
		if got := r.scans.Load(); got != tick {
			t.Fatalf("requests triggered scans: %d after %d ticks", got, tick-1)
		}
		wait = r.tick(t, wait)
	}
}

// A scan that overruns its interval is followed by the rest of the
// interval, or at once by one scan (not by every tick it missed); the
// probes and the scan duration say what happened.
func TestLoopScanOverrunsItsInterval(t *testing.T) {
	for _, tc := range []struct {
		name      string
		took      time.Duration // how long the first scan takes
		scans     int64         // scans before the loop first waits
		firstWait time.Duration
	}{
		{"a 4 s scan is followed by the 6 s left of the interval", 4 * time.Second, 1, 6 * time.Second},
		{"a 25 s scan is followed at once by one scan, not by the two missed", 25 * time.Second, 2, loopInterval},
		{"a scan of exactly one interval is followed at once by the next", loopInterval, 2, loopInterval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newLoopRig(t)
			r.fs.slow(r.clock, tc.took)
			r.run(t)
			if wait := r.idle(t); wait != tc.firstWait {
				t.Errorf("first wait %s, want %s", wait, tc.firstWait)
			}
			if got := r.scans.Load(); got != tc.scans {
				t.Errorf("%d scans before the first wait, want %d", got, tc.scans)
			}
			// An overrun that ended is neither stuck nor stale.
			if live, ready := r.probes(t); live != 200 || ready != 200 {
				t.Errorf("after the overrun: /healthz %d /readyz %d, want 200 200", live, ready)
			}
			_, own := r.get(t, "/metrics")
			for prefix, want := range map[string]string{
				"cgwarden_scans_total":               fmt.Sprint(tc.scans),
				"cgwarden_scan_duration_seconds_sum": fmt.Sprint(tc.took.Seconds()),
				"cgwarden_scan_failures_total":       "0",
			} {
				if line := metricLine(own, prefix+" "); line != prefix+" "+want {
					t.Errorf("/metrics: %q, want %s %s", line, prefix, want)
				}
			}
		})
	}
}

// A scan overrunning so far that the loop looks stuck: alive for 3
// intervals after the loop last completed a scan, then /healthz fails
// (the kubelet restarts the agent); ready until the last good scan is
// over 2 intervals old. Once the scan completes, both recover, and the
// next scan starts at once.
func TestLoopScanStuck(t *testing.T) {
	r := newLoopRig(t)
	r.run(t)
	wait := r.idle(t)
	wait = r.tick(t, wait) // scan 2: the last good scan, at +10 s
	entered, release := r.fs.stall()
	r.clock.Step(wait)
	<-entered // scan 3, from +20 s, stuck
	for _, c := range []struct {
		advance     time.Duration
		live, ready int
	}{
		{0, 200, 200},                // +20 s: 10 s since the last scan
		{10 * time.Second, 200, 200}, // +30 s: 2 intervals
		{time.Second, 200, 503},      // +31 s: stale
		{9 * time.Second, 200, 503},  // +40 s: 3 intervals
		{time.Millisecond, 503, 503}, // stuck
		{time.Hour, 503, 503},        // and stays so
	} {
		r.clock.Step(c.advance)
		if live, ready := r.probes(t); live != c.live || ready != c.ready {
			t.Errorf("+%s: /healthz %d /readyz %d, want %d %d", r.since(), live, ready, c.live, c.ready)
		}
	}
	if _, body := r.get(t, "/healthz"); !strings.Contains(body, "no scan for 1h0m30s (over 3 intervals of 10s)") {
		t.Errorf("/healthz says %q", body)
	}
	if _, body := r.get(t, "/readyz"); !strings.Contains(body, "the last good scan is 1h0m30s old (over 2 intervals of 10s)") {
		t.Errorf("/readyz says %q", body)
	}
	scans := r.scans.Load()
	release()
	if wait := r.idle(t); wait != loopInterval {
		t.Errorf("after the stuck scan the loop waits %s, want %s", wait, loopInterval)
	}
	if got := r.scans.Load(); got != scans+1 {
		t.Errorf("%d scans after the stuck one, want 1 (at once)", got-scans)
	}
	if live, ready := r.probes(t); live != 200 || ready != 200 {
		t.Errorf("after the stuck scan completed: /healthz %d /readyz %d, want 200 200", live, ready)
	}
}

// The first scan stuck: never ready; alive for 3 intervals from the
// loop's start, then not; both recover once it completes.
func TestLoopFirstScanStuck(t *testing.T) {
	r := newLoopRig(t)
	entered, release := r.fs.stall()
	r.run(t)
	<-entered
	for _, c := range []struct {
		advance     time.Duration
		live, ready int
	}{
		{0, 200, 503},
		{30 * time.Second, 200, 503},
		{time.Second, 503, 503},
	} {
		r.clock.Step(c.advance)
		if live, ready := r.probes(t); live != c.live || ready != c.ready {
			t.Errorf("+%s: /healthz %d /readyz %d, want %d %d", r.since(), live, ready, c.live, c.ready)
		}
	}
	if _, body := r.get(t, "/readyz"); !strings.Contains(body, "no scan completed yet") {
		t.Errorf("/readyz says %q", body)
	}
	release()
	r.idle(t)
	if live, ready := r.probes(t); live != 200 || ready != 200 {
		t.Errorf("after the first scan: /healthz %d /readyz %d, want 200 200", live, ready)
	}
}

// Scans that fail keep the loop alive (a restart would not help) and
// serve the last good scan flagged (resource_scrape_error 1), but make
// the agent unready once that scan is over 2 intervals old; a good scan
// makes it ready again.
func TestLoopScansFail(t *testing.T) {
	r := newLoopRig(t)
	r.run(t)
	wait := r.idle(t)
	_, res := r.get(t, "/metrics/resource")
	nodeCPU := metricLine(res, "node_cpu_usage_seconds_total ")
	if nodeCPU == "" || !strings.Contains(res, "resource_scrape_error 0") {
		t.Fatalf("after a good scan:\n%s", res)
	}
	r.fs.fail.Store(true)
	for i, want := range []int{200, 200, 503, 503, 503, 503} {
		wait = r.tick(t, wait)
		if live, ready := r.probes(t); live != 200 || ready != want {
			t.Errorf("%d failed scans: /healthz %d /readyz %d, want 200 %d", i+1, live, ready, want)
		}
	}
	_, res = r.get(t, "/metrics/resource")
	if !strings.Contains(res, "resource_scrape_error 1") || metricLine(res, "node_cpu_usage_seconds_total ") != nodeCPU {
		t.Errorf("after failed scans, want the last good scan (%s) flagged:\n%s", nodeCPU, res)
	}
	_, own := r.get(t, "/metrics")
	for _, want := range []string{"cgwarden_scan_failures_total 6", "cgwarden_scans_total 7", "cgwarden_last_scan_failed 1"} {
		if !strings.Contains(own, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if got := strings.Count(r.logs.String(), "scan failed; serving the previous scan"); got != 6 {
		t.Errorf("%d scan failures logged, want 6", got)
	}
	r.fs.fail.Store(false)
	r.tick(t, wait)
	if live, ready := r.probes(t); live != 200 || ready != 200 {
		t.Errorf("after a good scan: /healthz %d /readyz %d, want 200 200", live, ready)
	}
	_, res = r.get(t, "/metrics/resource")
	if !strings.Contains(res, "resource_scrape_error 0") {
		t.Errorf("after a good scan, still flagged:\n%s", res)
	}
}

// The pod metadata source failing is not the scan failing: the agent
// stays live and ready, pods keep the names last known, the failures are
// counted and the outage is logged once; when the source answers again
// its names are served.
func TestLoopMetadataFails(t *testing.T) {
	const named = `pod_cpu_usage_seconds_total{namespace="default",pod="%s"}`
	r := newLoopRig(t)
	r.run(t)
	wait := r.idle(t)
	r.failMeta(errors.New("CRI /run/containerd/containerd.sock: connection refused"))
	for i := 1; i <= 3; i++ {
		wait = r.tick(t, wait)
		if live, ready := r.probes(t); live != 200 || ready != 200 {
			t.Errorf("%d metadata failures: /healthz %d /readyz %d, want 200 200", i, live, ready)
		}
		if _, res := r.get(t, "/metrics/resource"); !strings.Contains(res, fmt.Sprintf(named, "spin-test")) {
			t.Fatalf("%d metadata failures: the pod lost its name:\n%s", i, res)
		}
		pic := r.loop.Latest()
		if _, ok := pic.Meta.Pod(seedPod); pic.Seq != uint64(i+1) || !ok {
			t.Errorf("%d metadata failures: picture %d without the last known metadata", i, pic.Seq)
		}
	}
	_, own := r.get(t, "/metrics")
	for _, want := range []string{"cgwarden_metadata_failures_total 3", "cgwarden_scan_failures_total 0", "cgwarden_last_scan_failed 0"} {
		if !strings.Contains(own, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if got := strings.Count(r.logs.String(), "pod metadata unavailable"); got != 1 {
		t.Errorf("the outage logged %d times, want once:\n%s", got, r.logs)
	}

	name := "spin-test-2"
	r.podName.Store(&name)
	r.failMeta(nil)
	r.tick(t, wait)
	if _, res := r.get(t, "/metrics/resource"); !strings.Contains(res, fmt.Sprintf(named, name)) {
		t.Errorf("metadata back: the pod not renamed:\n%s", res)
	}
	if got := strings.Count(r.logs.String(), "pod metadata available again"); got != 1 {
		t.Errorf("the recovery logged %d times, want once:\n%s", got, r.logs)
	}
	if _, own := r.get(t, "/metrics"); !strings.Contains(own, "cgwarden_metadata_failures_total 3\n") {
		t.Errorf("metadata back: cgwarden_metadata_failures_total is not 3")
	}
}

// Metadata failing from the start: pods are served by UID, and the agent
// is ready all the same.
func TestLoopMetadataFailsFromTheStart(t *testing.T) {
	r := newLoopRig(t)
	r.failMeta(errors.New("the API server: connection refused"))
	r.run(t)
	r.idle(t)
	if live, ready := r.probes(t); live != 200 || ready != 200 {
		t.Errorf("/healthz %d /readyz %d, want 200 200", live, ready)
	}
	if _, res := r.get(t, "/metrics/resource"); !strings.Contains(res, `pod_cpu_usage_seconds_total{namespace="",pod="pod`+seedPod+`"}`) {
		t.Errorf("the pod not served by its UID:\n%s", res)
	}
}

// An agent standing by (another holds the node's lock) says so on
// /readyz and stays ready while its scans are fresh, but not once they
// are stale: standing by hides no stuck scan.
func TestLoopStandby(t *testing.T) {
	r := newLoopRig(t)
	r.run(t)
	wait := r.idle(t)
	r.srv.Standby("another agent holds the node's lock")
	if code, body := r.get(t, "/readyz"); code != 200 || body != "ok; standby: another agent holds the node's lock\n" {
		t.Errorf("standing by: /readyz %d %q", code, body)
	}
	r.fs.fail.Store(true)
	for range 3 {
		wait = r.tick(t, wait)
	}
	if code, body := r.get(t, "/readyz"); code != 503 || strings.Contains(body, "standby") {
		t.Errorf("standing by with stale scans: /readyz %d %q, want 503 saying why", code, body)
	}
	r.fs.fail.Store(false)
	r.tick(t, wait)
	r.srv.Standby("")
	if code, body := r.get(t, "/readyz"); code != 200 || body != "ok\n" {
		t.Errorf("fixing: /readyz %d %q", code, body)
	}
}
