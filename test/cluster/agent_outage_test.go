package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/test/cluster/lab"
)

// outage is how long the API server stays down.
const outage = 30 * time.Second

// TestAgentRidesOutAPIServerOutage: the agent in fix mode with a
// misplaced pod; the API server is stopped for 30 s (the lab stops it,
// then starts it again: the process goes, as in a crash or a
// control-plane upgrade, and comes back with the same flags and etcd).
// Meanwhile the agent keeps serving (/metrics/resource and /stats/summary
// answer a token it checked before), trusts nothing it cannot confirm (a
// container killed during the outage is restarted by the kubelet, which
// needs no API server for that, into a new literal cgroup whose ID the
// agent's last pod list does not hold: it is not moved while the API
// server is away, and is adopted once the kubelet's status names it),
// logs the outage without repeating itself (no message twice in the
// outage's log), and resyncs after (a pod made after the outage is served
// by name).
func TestAgentRidesOutAPIServerOutage(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	importAgentImage(t)
	root, _ := cgroupRoot()
	ns := e.namespace(t)
	e.misplacedDeployment(t, ns, "busy", 1, burner)
	var p *corev1.Pod
	for _, q := range e.runningPods(t, ns, "busy", 1, 120*time.Second) {
		p = q
	}
	_, _, _ = e.installAgent(t, "testdata/agent-adopt-v1")
	id := containerID(p)
	waitAdopted(t, root, p, id, 60*time.Second)

	get := e.agentReader(t, ns)
	for _, path := range []string{"/metrics/resource", "/stats/summary"} {
		if code, body := get(path); code != 200 {
			t.Fatalf("before the outage, GET %s: %d %.200s", path, code, body)
		}
	}

	// The outage.
	l := lab.FromEnv()
	down := time.Now()
	if err := l.Stop(lab.APIServer, -1); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			if _, err := l.StartAgain(context.Background(), lab.APIServer); err != nil {
				t.Error(err)
			}
		}
	})
	if _, err := e.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
		t.Fatal("the API server still answers after it was stopped")
	}
	t.Logf("API server stopped in %v", time.Since(down).Round(100*time.Millisecond))

	// Serving.
	for _, path := range []string{"/metrics/resource", "/stats/summary"} {
		if code, body := get(path); code != 200 {
			t.Errorf("during the outage, GET %s: %d %.200s", path, code, body)
		}
	}
	// Fixing: the container killed, restarted by the kubelet into a new
	// literal cgroup (found by the pod's UID: no pod status to read now).
	// Only its cgroup's name ties it to the pod, and a name is what anyone
	// with a delegated cgroup can write (issue 21): not moved until the
	// metadata lists the ID.
	for _, pid := range procs(filepath.Join(root, "kubepods", "besteffort", "pod"+string(p.UID), id)) {
		_ = syscall.Kill(atoi(pid), syscall.SIGKILL)
	}
	killed := time.Now()
	var newID string
	var seen time.Time
	deadline := time.Now().Add(outage - 5*time.Second)
	for newID == "" && time.Now().Before(deadline) {
		for _, l := range literalsOf(t, map[string]bool{string(p.UID): true}) {
			if c := l[strings.LastIndex(l, ":")+1:]; c != id && !strings.HasPrefix(l, "/sys/fs/cgroup/unified") {
				newID, seen = c, time.Now()
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if newID == "" {
		t.Fatalf("the kubelet did not restart the killed container within %v of the outage", outage-5*time.Second)
	}
	t.Logf("during the outage: container killed; restarted by the kubelet %v later (%.12s)", seen.Sub(killed).Round(100*time.Millisecond), newID)
	time.Sleep(time.Until(down.Add(outage)))
	if ok, state := adopted(root, p, newID); ok {
		t.Errorf("during the outage, container %.12s, which the agent's last pod list does not name, was moved into the pod (%s)", newID, state)
	}
	for _, path := range []string{"/metrics/resource", "/stats/summary"} {
		if code, body := get(path); code != 200 {
			t.Errorf("late in the outage, GET %s: %d %.200s", path, code, body)
		}
	}

	upAt := time.Now()
	if _, err := l.StartAgain(ctx, lab.APIServer); err != nil {
		t.Fatal(err)
	}
	stopped = false
	back := time.Now()
	t.Logf("API server down %v in all (stopped for %v, then %v to start and be ready)", back.Sub(down).Round(100*time.Millisecond),
		upAt.Sub(down).Round(100*time.Millisecond), back.Sub(upAt).Round(100*time.Millisecond))

	// Confirmed: the kubelet's status names the new ID, the agent's
	// informer sees it (client-go relists after its back-off, up to 30 s
	// after failures), and the next scan adopts it.
	at := waitAdopted(t, root, p, newID, 60*time.Second+agentInterval+adoptionSlack)
	t.Logf("the restarted container adopted %v after the API server was back", at.Sub(back).Round(100*time.Millisecond))

	// Resync: a pod made after the outage is served by its name (names come
	// from the agent's pod informer).
	after := e.runPod(t, ns, "after", "exec sleep 3600")
	running := time.Now()
	// client-go's informer lists again after its back-off (up to 30 s
	// after failures), so allow a minute.
	poll.Until(t, 60*time.Second, "the agent serving the pod made after the outage", func() (bool, string, error) {
		code, body := get("/stats/summary")
		return code == 200 && podNamed.MatchString(body), fmt.Sprintf("%d", code), nil
	})
	t.Logf("pod %s made after the outage: running %v after the API server was back, served by name by the agent %v after that",
		after.Name, running.Sub(back).Round(100*time.Millisecond), time.Since(running).Round(100*time.Millisecond))

	// The log: no message repeated in the outage, and the outage said.
	logs, err := runKubectl(e, "logs", "-n", "cgwarden-system", "ds/cgwarden", "--timestamps")
	if err != nil {
		t.Fatalf("kubectl logs: %v\n%s", err, logs)
	}
	window := linesBetween(logs, down, time.Now())
	t.Logf("the agent's log from the outage's start to the resync (%d lines):\n%s", len(window), strings.Join(window, "\n"))
	counts := map[string]int{}
	for _, l := range window {
		counts[logKey(l)]++
	}
	var repeated []string
	for k, n := range counts {
		if n > 1 {
			repeated = append(repeated, fmt.Sprintf("%d× %s", n, k))
		}
	}
	sort.Strings(repeated)
	if len(repeated) > 0 {
		t.Errorf("the agent repeated itself during the outage:\n%s", strings.Join(repeated, "\n"))
	}
	said := false
	for _, l := range window {
		said = said || strings.Contains(l, "API server unreachable")
	}
	if !said {
		t.Errorf("the agent's log does not say the API server was unreachable")
	}
}

// agentReader returns a GET on the agent's endpoints with the token of a
// ServiceAccount of ns allowed nodes/metrics and nodes/stats.
func (e *env) agentReader(t *testing.T, ns string) func(path string) (int, string) {
	t.Helper()
	tok := e.nodeReaderToken(t, ns, "reader", "nodes/metrics", "nodes/stats")
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(path string) (int, string) { return agentGet(client, path, tok) }
	// The new binding reaches the API server's authorizer within seconds.
	poll.Until(t, 30*time.Second, "the reader allowed by the agent", func() (bool, string, error) {
		code, body := get("/stats/summary")
		return code == 200, fmt.Sprintf("%d %.100s", code, body), nil
	})
	return get
}

// linesBetween keeps the lines of `kubectl logs --timestamps` written
// from..to, without their timestamps.
func linesBetween(logs string, from, to time.Time) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		ts, rest, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || at.Before(from) || at.After(to) {
			continue
		}
		out = append(out, rest)
	}
	return out
}

var (
	// podNamed finds the pod "after" in a Summary (indented or not).
	podNamed = regexp.MustCompile(`"name":\s*"after"`)
	digits   = regexp.MustCompile(`[0-9]+`)
	slogAttr = regexp.MustCompile(`(?:^| )(level|msg|component)=("(?:[^"\\]|\\.)*"|\S+)`)
)

// logKey is what makes two log lines "the same message": slog's level,
// component and msg (the agent logs with slog's text handler); for any
// other line, its text after klog's header with numbers masked.
func logKey(l string) string {
	if strings.HasPrefix(l, "time=") {
		f := map[string]string{}
		for _, m := range slogAttr.FindAllStringSubmatch(l, -1) {
			f[m[1]] = m[2]
		}
		return f["level"] + " " + f["component"] + " " + f["msg"]
	}
	if _, rest, ok := strings.Cut(l, "] "); ok {
		l = rest
	}
	return digits.ReplaceAllString(l, "#")
}

// logKey folds repeats of a message and only them (needs no cluster).
func TestLogKey(t *testing.T) {
	a := `time=2026-11-30T14:00:01.000Z level=WARN msg="API server unreachable: serving" component=apiserver err="dial tcp: refused"`
	b := `time=2026-11-30T14:00:09.000Z level=WARN msg="API server unreachable: serving" component=apiserver err="other"`
	c := `time=2026-11-30T14:00:09.000Z level=INFO msg="API server answers again" component=apiserver away=31s`
	k1 := `E1130 14:00:01.000001       1 reflector.go:200] "Failed to watch" err="rv=12"`
	k2 := `E1130 14:00:03.000001       1 reflector.go:200] "Failed to watch" err="rv=13"`
	if logKey(a) != logKey(b) || logKey(a) == logKey(c) || logKey(k1) != logKey(k2) || logKey(k1) == logKey(a) {
		t.Errorf("keys: %q %q %q %q %q", logKey(a), logKey(b), logKey(c), logKey(k1), logKey(k2))
	}
	if want := `WARN apiserver "API server unreachable: serving"`; logKey(a) != want {
		t.Errorf("logKey(a) = %q, want %q", logKey(a), want)
	}
}
