package agent_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/agent"
	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// lister is the pods of a VMTree as the test changes them.
type lister struct {
	mu   sync.Mutex
	pods []metadata.Pod
}

func (l *lister) Pods(context.Context) ([]metadata.Pod, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pods, nil
}

func (l *lister) set(p []metadata.Pod) {
	l.mu.Lock()
	l.pods = p
	l.mu.Unlock()
}

// soak is how long TestAgentFixModeUnderChurn churns: CGWARDEN_AGENT_SOAK
// (a Go duration) for a longer soak, e.g.
//
//	CGWARDEN_REQUIRE_REAL=1 CGWARDEN_AGENT_SOAK=60s go test -race -count=1 -run TestAgentFixModeUnderChurn ./internal/agent/
func soak(t *testing.T) time.Duration {
	if v := os.Getenv("CGWARDEN_AGENT_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CGWARDEN_AGENT_SOAK=%q: %v", v, err)
		}
		return d
	}
	return 20 * time.Second
}

// startAgent completes and starts an agent of o; stop (also run at the
// test's end, once) stops and closes it.
func startAgent(t *testing.T, o *agent.Options) (a *agent.Agent, stop func()) {
	t.Helper()
	a = completeAgent(t, o)
	stopLoop := a.Start(t.Context())
	stop = sync.OnceFunc(func() { stopLoop(); a.Close() })
	t.Cleanup(stop)
	return a, stop
}

// completeAgent completes an agent of o (not started).
func completeAgent(t testing.TB, o *agent.Options) *agent.Agent {
	t.Helper()
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	a, err := cfg.Complete(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAgentFixModeUnderChurn runs the agent as `serve --fix=all` runs it
// (serving, auditing, holding weights and adopting, one node loop) on a
// live scratch tree while pods and containers are made and removed and
// the kubelet resets the BestEffort tier's weight; run it with -race. At
// the end the tier holds the weight of the sizes left, /metrics counts one
// scanner and one inotify instance (three scanners and four instances
// before the node loop), and /audit was served from the same scans.
func TestAgentFixModeUnderChurn(t *testing.T) {
	s := realtest.NewScratch(t)
	tree := realtest.NewVMTree(s, 500, 1000, 2000)
	pods := &lister{}
	pods.set(tree.Pods())
	before := s.Host.Usage()
	o := &agent.Options{Listen: "127.0.0.1:0", Interval: 200 * time.Millisecond, SizeCheck: 50 * time.Millisecond,
		Fix: []string{"size-blind-weights", "besteffort-starvation", "misplaced-container"}, JournalDir: t.TempDir(),
		MaxTierCPU: "100", HostRoot: "/", Base: s.Name, Lister: pods, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		// No API server here: the pods' size annotations count only as
		// --trust-size-annotations=default says (sizetrust).
		TrustSizes: "default"}
	a, stop := startAgent(t, o)
	tier := realtest.Kube + "/besteffort"
	target := func() uint64 {
		sum := uint64(fairness.MinShares)
		for _, p := range tree.VMs {
			sum += fairness.MilliCPUToShares(p.MilliCPU)
		}
		return tree.PodWeight(sum)
	}
	waitTier := func(what string) {
		t.Helper()
		poll.Every(10*time.Millisecond).Until(t, 15*time.Second, what, func() (bool, string, error) {
			w, want := tree.Weight(tier), target()
			return w == want, fmt.Sprintf("tier weight %d, want %d", w, want), nil
		})
	}
	waitTier("first plan")

	end := time.Now().Add(soak(t))
	resets, made := 0, 0
	for i := 0; time.Now().Before(end); i++ {
		switch i % 4 {
		case 0: // a kubelet-style reset of the tier
			tree.SetWeight(tier, tree.PodWeight(fairness.MinShares))
			resets++
		case 1: // a new VM pod
			tree.AddVM(int64(500 * (1 + i%3)))
			pods.set(tree.Pods())
			made++
		case 2: // a scratch container made and removed in a VM pod
			rel := path.Join(tree.VMs[len(tree.VMs)-1].Rel, fmt.Sprintf("scratch%d", i))
			s.Mkdir(rel)
			time.Sleep(20 * time.Millisecond)
			for _, p := range s.Points {
				_ = s.Host.Rmdir(path.Join(p, s.Name, rel))
			}
		case 3: // the newest VM pod goes away
			if len(tree.VMs) > 3 {
				gone := tree.VMs[len(tree.VMs)-1]
				tree.VMs = tree.VMs[:len(tree.VMs)-1]
				pods.set(tree.Pods())
				for _, rel := range []string{gone.CtrRel, gone.Rel} {
					for _, p := range s.Points {
						_ = s.Host.Rmdir(path.Join(p, s.Name, rel))
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitTier("after churn")
	t.Logf("%d resets, %d pods made under churn; tier at %d", resets, made, target())

	h := a.Server.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	metrics := rec.Body.String()
	for name, want := range map[string]int{"cgwarden_agent_scanners": before.Caches + 1, "cgwarden_agent_inotify_instances": before.Watchers + 1} {
		m := regexp.MustCompile(`(?m)^` + name + ` (\d+)$`).FindStringSubmatch(metrics)
		if m == nil {
			t.Errorf("/metrics lacks %s", name)
			continue
		}
		if got, _ := strconv.Atoi(m[1]); got != want {
			t.Errorf("%s %d in fix mode, want %d (one for the whole agent)", name, got, want)
		}
	}
	if !regexp.MustCompile(`(?m)^cgwarden_agent_inotify_watches [1-9]`).MatchString(metrics) {
		t.Error("/metrics counts no inotify watch")
	}
	// The adopter ran on the loop's pictures and counted its runs.
	if !regexp.MustCompile(`(?m)^cgwarden_adoption_runs_total\{result="clean"\} [1-9]`).MatchString(metrics) {
		t.Error("/metrics counts no clean adoption run")
	}
	probe := func(p string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		return rec.Code
	}
	for _, p := range []string{"/audit", "/healthz", "/readyz"} {
		if c := probe(p); c != 200 {
			t.Errorf("%s while the loop runs: %d", p, c)
		}
	}
	stop()
	// The probes follow the agent's loop: stopped, it goes stale.
	time.Sleep(4 * o.Interval)
	if live, ready := probe("/healthz"), probe("/readyz"); live != 503 || ready != 503 {
		t.Errorf("%s after the loop stopped: /healthz %d /readyz %d, want 503 503", 4*o.Interval, live, ready)
	}
	if u := s.Host.Usage(); u.Caches != before.Caches || u.Watchers != before.Watchers {
		t.Errorf("after stop: %+v open on the host, %+v before", u, before)
	}
}

// TestSecondAgentWaitsForTheFirst: two fixing agents on one node, as a
// DaemonSet update with maxSurge runs them, sharing one journal directory
// or each given its own --journal-dir (the node lock, not the journal
// directory's, is what keeps the second out then). They
// disagree on the BestEffort tier's target (the second caps the sizes it
// counts at 1 CPU). The first holds the tier; the second, started beside
// it, serves and is Ready but says it stands by (/readyz,
// cgwarden_agent_fix_lock 0, one log line) and writes nothing while the
// kubelet resets the tier: the tier is never seen at the second's target,
// so the two never alternate. Once the first stops, the second takes the
// lock within a few retries and holds its own target.
func TestSecondAgentWaitsForTheFirst(t *testing.T) {
	t.Run("one journal directory", func(t *testing.T) { secondAgentWaits(t, false) })
	t.Run("two journal directories", func(t *testing.T) { secondAgentWaits(t, true) })
}

func secondAgentWaits(t *testing.T, twoDirs bool) {
	s := realtest.NewScratch(t)
	tree := realtest.NewVMTree(s, 500, 1000, 2000)
	pods := &lister{}
	pods.set(tree.Pods())
	shared := t.TempDir()
	var logB syncBuffer
	start := func(maxTier string, w io.Writer) (*agent.Agent, func()) {
		dir := shared
		if twoDirs {
			dir = t.TempDir()
		}
		o := &agent.Options{Listen: "127.0.0.1:0", Interval: 200 * time.Millisecond, SizeCheck: 50 * time.Millisecond,
			Fix: []string{"size-blind-weights", "besteffort-starvation"}, JournalDir: dir, MaxTierCPU: maxTier,
			HostRoot: "/", Base: s.Name, Lister: pods, Log: slog.New(slog.NewTextHandler(w, nil)), TrustSizes: "default"}
		return startAgent(t, o)
	}
	tier := realtest.Kube + "/besteffort"
	targetA := tree.PodWeight(fairness.MinShares + fairness.MilliCPUToShares(1000) + fairness.MilliCPUToShares(2000))
	targetB := tree.PodWeight(fairness.MinShares + fairness.MilliCPUToShares(1000)) // capped at 1 CPU
	minimum := tree.PodWeight(fairness.MinShares)
	waitTier := func(what string, want uint64, limit time.Duration) time.Duration {
		t.Helper()
		from := time.Now()
		poll.Every(5*time.Millisecond).Until(t, limit, what, func() (bool, string, error) {
			w := tree.Weight(tier)
			return w == want, fmt.Sprintf("tier weight %d, want %d", w, want), nil
		})
		return time.Since(from)
	}
	_, stopA := start("100", io.Discard)
	waitTier("the first agent's plan", targetA, 15*time.Second)

	b, _ := start("1", &logB)
	get := func(p string) (int, string) {
		rec := httptest.NewRecorder()
		b.Server.Handler().ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		return rec.Code, rec.Body.String()
	}
	// The second agent serves (its scans run) and stands by.
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := get("/readyz")
		if code == 200 && strings.Contains(body, "standby") {
			t.Logf("the second agent's /readyz: %s", strings.TrimSpace(body))
			break
		}
		if time.Now().After(deadline) {
			// Not fatal: whether the two then alternate is the point.
			t.Errorf("the second agent's /readyz: %d %q, want 200 naming its standby", code, body)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, m := get("/metrics"); !regexp.MustCompile(`(?m)^cgwarden_agent_fix_lock 0$`).MatchString(m) {
		t.Errorf("the waiting agent's /metrics lacks cgwarden_agent_fix_lock 0")
	}
	// Kubelet-style resets while both run: only the first restores, to its
	// own target; the second's target never appears.
	seen := map[uint64]int{}
	end := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(end); i++ {
		if i%100 == 0 {
			tree.SetWeight(tier, minimum)
		}
		seen[tree.Weight(tier)]++
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("tier values seen while both ran (value: samples): %v", seen)
	if seen[targetB] > 0 {
		t.Errorf("the waiting agent wrote its target %d to the tier (%d samples): the agents alternate", targetB, seen[targetB])
	}
	if seen[targetA] == 0 {
		t.Errorf("the first agent did not hold the tier at %d: %v", targetA, seen)
	}
	waitTier("the first agent after the last reset", targetA, 5*time.Second)
	if n := strings.Count(logB.String(), "another cgwarden agent fixes this node"); n != 1 {
		t.Errorf("the waiting agent logged its wait %d times, want once:\n%s", n, logB.String())
	}

	// The first goes; the second takes over.
	stopA()
	took := waitTier("the second agent after the first stopped", targetB, 10*time.Second)
	t.Logf("the second agent held its target %v after the first stopped", took)
	// Ready and no longer standing by. At a 200 ms interval a scan
	// delayed by a loaded machine makes /readyz stale (503) for a moment,
	// as it should: the answer is polled, not taken once.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body := get("/readyz")
		if code == 200 && !strings.Contains(body, "standby") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the second agent's /readyz 5s after taking over: %d %q, want 200 without standby", code, body)
			break
		}
	}
	if _, m := get("/metrics"); !regexp.MustCompile(`(?m)^cgwarden_agent_fix_lock 1$`).MatchString(m) {
		t.Errorf("the fixing agent's /metrics lacks cgwarden_agent_fix_lock 1")
	}
	if !strings.Contains(logB.String(), "took the node's agent lock") {
		t.Errorf("the second agent did not log taking the lock:\n%s", logB.String())
	}
}

// syncBuffer is a log destination read while agents write to it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// stuckLister enters a metadata call that ignores its context (an API
// call stuck on a half-open connection) and stays in it until released.
type stuckLister struct {
	entered, release chan struct{}
	once             sync.Once
}

func (l *stuckLister) Pods(context.Context) ([]metadata.Pod, error) {
	l.once.Do(func() { close(l.entered) })
	<-l.release
	return nil, nil
}

// TestAgentStopsWithAStuckLoop: the node loop stuck in a metadata call
// that ignores its context (in fix mode, the fixers waiting on it) must
// not hold the shutdown: stop returns after StopWait, says why, and
// Close leaves the descriptors to the process's exit. Before the bound,
// stop waited for the loop for ever and the kubelet SIGKILLed the agent a
// grace period later (the cluster lane's TestStalledScanLoopRestarted).
func TestAgentStopsWithAStuckLoop(t *testing.T) {
	s := realtest.NewScratch(t)
	realtest.NewVMTree(s, 1000)
	stuck := &stuckLister{entered: make(chan struct{}), release: make(chan struct{})}
	// Released at the end, so the test binary keeps no stuck goroutine.
	t.Cleanup(func() { close(stuck.release) })
	var logB syncBuffer
	o := &agent.Options{Listen: "127.0.0.1:0", Interval: 100 * time.Millisecond,
		Fix: []string{"size-blind-weights", "besteffort-starvation"}, JournalDir: t.TempDir(),
		HostRoot: "/", Base: s.Name, Lister: stuck, Log: slog.New(slog.NewTextHandler(&logB, nil)), TrustSizes: "default"}
	a := completeAgent(t, o)
	stop := a.Start(t.Context())
	select {
	case <-stuck.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the loop never asked for the pods")
	}
	stopped := make(chan time.Duration)
	go func() {
		t0 := time.Now()
		stop()
		a.Close()
		stopped <- time.Since(t0)
	}()
	select {
	case took := <-stopped:
		t.Logf("stopped %v after the shutdown began, the loop still stuck", took.Round(time.Millisecond))
	case <-time.After(agent.StopWait + 30*time.Second):
		t.Fatalf("stop has not returned %v after it began: the stuck loop holds the shutdown", agent.StopWait+30*time.Second)
	}
	if !strings.Contains(logB.String(), "exiting without it") {
		t.Errorf("the shutdown did not say what it left behind:\n%s", logB.String())
	}
}
