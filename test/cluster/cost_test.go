package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/test/cluster/lab"
)

// TestCostBesideTheKubelet puts the agent's steady cost next to the
// kubelet's on the same node, same pods, same run: 60 idle pods (a
// sleeping busybox each), cgwarden serve on the host (its defaults:
// steady-state scans every 10 s; pod metadata from the API server, as
// the DaemonSet runs it), and
//   - CPU per second over 30 s (three scans) of the agent, and of the kubelet,
//     containerd and the pods' shims (what the node pays today to know
//     its pods' figures), and of a second agent in fix mode (every rule,
//     its own journal) over the same window, for the fix-mode/observe
//     ratio;
//   - the CPU of one collection of every pod's CPU and memory from each,
//     GET /stats/summary?only_cpu_and_memory=true (5 of each, medians):
//     for the kubelet, what the kubelet, containerd and the shims spend
//     answering; for the agent, what it spends answering plus one scan
//     (its collection is the scan; the answer reads the scan).
//
// Figures are logged for docs/benchmarks.md; the test asserts only what
// must hold for them to mean anything: 60 pods Running, both endpoints
// listing all 60, every process measured alive.
func TestCostBesideTheKubelet(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	ns := e.namespace(t)
	const pods = 60
	zero := int64(0)
	for i := range pods {
		_, err := e.cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("idle-%02d", i)},
			Spec: corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: &zero, Containers: []corev1.Container{{
				Name: "idle", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	poll.Until(t, 5*time.Minute, fmt.Sprintf("%d pods Running", pods), func() (bool, string, error) {
		list, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == pods, fmt.Sprintf("%d of %d Running", running, pods), nil
	})
	t.Logf("%d pods Running %s after the last was created", pods, time.Since(start).Round(time.Second))
	// Delete them in the background at the end, all at once: the
	// namespace's deletion does it.

	// The agent as observe-only, and beside it the same agent in fix mode
	// (every rule, its own journal), measured over the same window: the
	// one-node-loop issue's bar is fix mode within 1.1× observe-only.
	bin := buildCgwarden(t)
	startAgent := func(what string, extra ...string) (*exec.Cmd, string) {
		port := freePort(t)
		// As the DaemonSet runs it: pod metadata from the API server
		// (an informer on this node's pods), so that the fix-mode
		// holder reads sizes on the informer's notifications, with no
		// timer of its own.
		cmd := exec.Command(bin, append([]string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--metadata", "kubernetes",
			"--kubeconfig", e.kubeconfig, "--node-name", e.node, "--interval", "10s"}, extra...)...)
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			if t.Failed() {
				t.Logf("the %s agent's log:\n%s", what, log.String())
			}
		})
		url := fmt.Sprintf("http://127.0.0.1:%d", port)
		poll.Until(t, 60*time.Second, "the "+what+" agent ready", func() (bool, string, error) {
			resp, err := http.Get(url + "/readyz")
			if err != nil {
				return false, err.Error(), nil
			}
			resp.Body.Close()
			return resp.StatusCode == 200, resp.Status, nil
		})
		return cmd, url
	}
	agent, agentURL := startAgent("observe-only")
	fixAgent, _ := startAgent("fix-mode", "--fix", "misplaced-container,size-blind-weights,besteffort-starvation", "--journal-dir", t.TempDir())

	kubeletGet := kubeletReader(t, e, ns)
	agentGet := func() (int, string) {
		resp, err := http.Get(agentURL + "/stats/summary?only_cpu_and_memory=true")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Both list every pod before anything is measured (the agent's
	// scan has the names once its informer has synced).
	poll.Until(t, 60*time.Second, "both summaries list the 60 pods", func() (bool, string, error) {
		_, a := agentGet()
		_, k := kubeletGet()
		na, nk := strings.Count(a, `"namespace": "`+ns+`"`)+strings.Count(a, `"namespace":"`+ns+`"`), strings.Count(k, `"namespace": "`+ns+`"`)+strings.Count(k, `"namespace":"`+ns+`"`)
		return na == pods && nk == pods, fmt.Sprintf("agent lists %d, kubelet %d", na, nk), nil
	})

	node := nodeProcesses(t, agent.Process.Pid)
	node.fixAgent = fixAgent.Process.Pid
	// Idle: 30 s (three of the agents' scans), nothing asked of either.
	before := node.cpu(t)
	t0 := time.Now()
	time.Sleep(30 * time.Second)
	after := node.cpu(t)
	secs := time.Since(t0).Seconds()
	rate := func(who string) float64 { return float64(after[who]-before[who]) / 1e6 / secs }
	kubeSide := rate("kubelet") + rate("containerd") + rate("shims")
	t.Logf("idle, %d pods, %.0f s: agent %.2f CPU-ms/s; kubelet %.2f + containerd %.2f + %d shims %.2f = %.2f CPU-ms/s (%.0f× the agent)",
		pods, secs, rate("agent"), rate("kubelet"), rate("containerd"), len(node.shims), rate("shims"), kubeSide, kubeSide/rate("agent"))
	t.Logf("idle, same window: the fix-mode agent (--fix with every rule) %.2f CPU-ms/s, %.2f× the observe-only agent", rate("fixagent"), rate("fixagent")/rate("agent"))

	// One collection from each, five times, alternating, 2 s apart.
	var agentCost, kubeCost []float64
	for range 5 {
		c0 := node.cpu(t)
		if code, _ := kubeletGet(); code != 200 {
			t.Fatalf("kubelet summary: %d", code)
		}
		c1 := node.cpu(t)
		kubeCost = append(kubeCost, float64(c1["kubelet"]-c0["kubelet"]+c1["containerd"]-c0["containerd"]+c1["shims"]-c0["shims"])/1e6)
		time.Sleep(time.Second)
		c0 = node.cpu(t)
		if code, _ := agentGet(); code != 200 {
			t.Fatalf("agent summary: %d", code)
		}
		c1 = node.cpu(t)
		agentCost = append(agentCost, float64(c1["agent"]-c0["agent"])/1e6)
		time.Sleep(time.Second)
	}
	slices.Sort(agentCost)
	slices.Sort(kubeCost)
	// The agent's collection is its scan: its idle CPU over the 6 scans
	// of the idle minute, per scan, bounds a scan's cost from above.
	perScan := rate("agent") * 10
	t.Logf("one /stats/summary?only_cpu_and_memory=true: kubelet+containerd+shims %.2f CPU-ms (median of %v); agent answering %.2f CPU-ms (median of %v) + one scan ≤ %.2f CPU-ms = %.2f CPU-ms (%.0f× cheaper)",
		kubeCost[2], kubeCost, agentCost[2], agentCost, perScan, agentCost[2]+perScan, kubeCost[2]/(agentCost[2]+perScan))
}

// kubeletReader returns a GET of the kubelet's summary with a
// ServiceAccount token allowed nodes/stats (the kubelet is asked
// directly: the API server refuses to proxy to a loopback node address).
func kubeletReader(t *testing.T, e *env, ns string) func() (int, string) {
	tok := e.nodeReaderToken(t, ns, "stats-reader", "nodes/stats")
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func() (int, string) {
		req, _ := http.NewRequest("GET", "https://127.0.0.1:10250/stats/summary?only_cpu_and_memory=true", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// RBAC reaches the kubelet's authorizer cache within seconds.
	poll.Until(t, 30*time.Second, "the kubelet's summary with the reader's token", func() (bool, string, error) {
		code, body := get()
		return code == 200, fmt.Sprintf("%d %.200s", code, body), nil
	})
	return get
}

// nodeProcs are the processes whose CPU is compared.
type nodeProcs struct {
	agent, kubelet, containerd int
	fixAgent                   int // a second agent in fix mode; 0 when none
	shims                      []int
}

// nodeProcesses finds the kubelet and containerd by the lab's records
// of what it started, and the shims by the socket they were given.
func nodeProcesses(t *testing.T, agent int) *nodeProcs {
	l := lab.FromEnv()
	pid := func(name string) int {
		p, err := l.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if !p.Running() {
			t.Fatalf("%s (pid %d) does not run", name, p.PID)
		}
		return p.PID
	}
	p := &nodeProcs{agent: agent, kubelet: pid(lab.Kubelet), containerd: pid(lab.Containerd)}
	sock := os.Getenv("CGWARDEN_CLUSTER_CONTAINERD")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmd, "containerd-shim") && strings.Contains(cmd, "-address "+sock+" ") {
			n, _ := strconv.Atoi(strings.Split(f, "/")[2])
			p.shims = append(p.shims, n)
		}
	}
	if len(p.shims) < 60 {
		t.Fatalf("found %d containerd shims, want one per pod (60)", len(p.shims))
	}
	return p
}

// cpu is each side's run time so far, ns (all threads of each process).
func (p *nodeProcs) cpu(t *testing.T) map[string]int64 {
	out := map[string]int64{}
	var mu sync.Mutex
	add := func(who string, pid int, must bool) {
		n, err := threadsRunNs(pid)
		if err != nil && must {
			t.Fatalf("%s (pid %d): %v", who, pid, err)
		}
		mu.Lock()
		out[who] += n
		mu.Unlock()
	}
	add("agent", p.agent, true)
	if p.fixAgent != 0 {
		add("fixagent", p.fixAgent, true)
	}
	add("kubelet", p.kubelet, true)
	add("containerd", p.containerd, true)
	for _, s := range p.shims {
		add("shims", s, false)
	}
	return out
}

// threadsRunNs sums the run time of every thread of pid
// (/proc/PID/task/*/schedstat, ns).
func threadsRunNs(pid int) (int64, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, task := range tasks {
		raw, err := os.ReadFile(filepath.Join(dir, task.Name(), "schedstat"))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(raw)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			sum += n
		}
	}
	return sum, nil
}
