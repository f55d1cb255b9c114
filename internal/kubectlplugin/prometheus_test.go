package kubectlplugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/realtest"

	"github.com/cgwarden/cgwarden/internal/inspect"
	"github.com/cgwarden/cgwarden/internal/poll"
)

// prometheusBinary is Debian's prometheus (package prometheus, which .ci/run
// installs): the test skips without it, and fails when
// CGWARDEN_REQUIRE_REAL=1.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	return realtest.HostTool(t, "prometheus", "prometheus")
}

// startServe builds cgwarden and runs `cgwarden serve` on an embedded
// snapshot with its pods file, as node, on a loopback port it returns.
func startServe(t *testing.T, bin, node string) string {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--node-name", node, "--metadata", "file",
		"--snapshot", "example:"+node, "--pods", filepath.Join("..", "examples", "snapshots", node+".pods.json"))
	return realtest.StartServe(t, cmd)
}

func buildCgwarden(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cgwarden")
	build := exec.Command("go", "build", "-o", bin, "./cmd/cgwarden")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building cgwarden: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startPrometheus runs a real Prometheus on loopback scraping targets
// (node name → address) as job cgwarden, with deploy/prometheus's rules,
// every second, and returns its URL once it is ready.
func startPrometheus(t *testing.T, targets map[string]string) string {
	t.Helper()
	bin := prometheusBinary(t)
	dir := t.TempDir()
	rules, err := filepath.Abs(filepath.Join("..", "..", "deploy", "prometheus", "cgwarden.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// honor_labels and a node label per target: what docs/alerts.md
	// ("Scraping") asks of a scrape of the agent.
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [%q]\nscrape_configs:\n  - job_name: cgwarden\n    honor_labels: true\n    static_configs:\n", rules)
	for node, addr := range targets {
		cfg += fmt.Sprintf("      - {targets: [%q], labels: {node: %q}}\n", addr, node)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	listen := freePort(t)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus:\n%s", logs.String())
		}
	})
	base := "http://" + listen
	poll.Every(200*time.Millisecond).UntilTrue(t, 60*time.Second, "Prometheus ready", func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base
}

// promScalar is the value of an instant query that returns one sample,
// NaN if it returns none.
func promScalar(t *testing.T, base, q string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	if len(r.Data.Result) != 1 {
		return math.NaN()
	}
	v, _ := strconv.ParseFloat(fmt.Sprint(r.Data.Result[0].Value[1]), 64)
	return v
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

// runPlugin runs kubectl cgwarden with args and no kubeconfig.
func runPlugin(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	var o, e bytes.Buffer
	code = Main(args, &o, &e)
	return o.String(), e.String(), code
}

// TestPrometheusFleet: a real Prometheus scrapes two real `cgwarden
// serve` on embedded snapshots (and a third target where nothing
// listens), with deploy/prometheus's rules; once the rules have been
// evaluated on both nodes, `kubectl cgwarden audit|inspect -A
// --prometheus URL` shows, from one query, what each serve's own /audit
// and /inspect say: the findings counted by rule and severity, each pod's
// weight, guaranteed and used cores, working set and containers; the
// node whose agent cannot be scraped is named, and the run fails (exit
// 1) as when a node cannot be read through its port-forward.
func TestPrometheusFleet(t *testing.T) {
	prometheusBinary(t)
	bin := buildCgwarden(t)
	nodes := []string{"cgroupfs-v1-containerd", "seed-003-k3s-spin"}
	targets := map[string]string{"gone": freePort(t)}
	for _, n := range nodes {
		targets[n] = startServe(t, bin, n)
	}
	base := startPrometheus(t, targets)
	poll.Every(200*time.Millisecond).UntilTrue(t, 90*time.Second, "both agents scraped and the recording rules evaluated", func() bool {
		return promScalar(t, base, `count(up{job="cgwarden"} == 1)`) == 2 &&
			promScalar(t, base, `count(node:cgwarden_pod_misplaced:sum)`) == 2 &&
			promScalar(t, base, `count(up{job="cgwarden"} == 0)`) == 1
	})

	t.Run("audit", func(t *testing.T) {
		out, stderr, code := runPlugin(t, "audit", "-A", "--prometheus", base, "-o", "json")
		t.Logf("stderr: %s", stderr)
		if code != 1 || !strings.Contains(stderr, "node gone: Prometheus's last scrape of the agent failed (up == 0)") {
			t.Errorf("exit %d, stderr %q: want 1 and node gone named", code, stderr)
		}
		doc := decodeProm(t, out, 3)
		for _, n := range doc.Nodes {
			if n.Name == "gone" {
				continue
			}
			var audit struct {
				Findings []finding `json:"findings"`
			}
			getJSON(t, "http://"+targets[n.Name]+"/audit", &audit)
			want := map[string]int{}
			for _, f := range audit.Findings {
				want[f.Rule+" "+string(f.Severity)]++
			}
			got := map[string]int{}
			for _, f := range n.Findings {
				got[f.Rule+" "+f.Severity] += f.Count
			}
			if fmt.Sprint(got) != fmt.Sprint(want) || len(want) == 0 {
				t.Errorf("node %s: Prometheus's findings %v, the agent's /audit %v", n.Name, got, want)
			}
			if n.Error != "" || n.ScanTime == nil {
				t.Errorf("node %s: error %q, scan time %v", n.Name, n.Error, n.ScanTime)
			}
		}
		table, _, _ := runPlugin(t, "audit", "-A", "--prometheus", base)
		golden(t, "prom-audit-all.table", []byte(table))
	})

	t.Run("inspect", func(t *testing.T) {
		out, _, code := runPlugin(t, "inspect", "-A", "--prometheus", base, "-o", "json")
		if code != 1 {
			t.Errorf("exit %d, want 1 (node gone)", code)
		}
		doc := decodeProm(t, out, 3)
		for _, n := range doc.Nodes {
			if n.Name == "gone" {
				continue
			}
			var inv struct {
				Pods []inspect.PodJSON `json:"pods"`
			}
			getJSON(t, "http://"+targets[n.Name]+"/inspect", &inv)
			comparePods(t, n, inv.Pods)
		}
		table, _, _ := runPlugin(t, "inspect", "-A", "--prometheus", base)
		golden(t, "prom-inspect-all.table", []byte(table))
	})

	t.Run("through the API server's service proxy", func(t *testing.T) {
		// A stand-in for the API server's service proxy (the lane's API
		// server refuses to proxy to a loopback endpoint, and everything
		// here is on loopback): it checks the path and the kubeconfig's
		// token, strips the prefix and passes the request to the real
		// Prometheus, as the API server would. HTTPS: client-go sends a
		// kubeconfig's credentials only over TLS.
		target, _ := url.Parse(base)
		const prefix = "/api/v1/namespaces/monitoring/services/prometheus:9090/proxy"
		var seen []string
		apiserver := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
			if !strings.HasPrefix(r.URL.Path, prefix+"/") || r.Header.Get("Authorization") != "Bearer s3cret" {
				http.Error(w, "forbidden", http.StatusForbidden)
				return
			}
			r.URL.Path = strings.TrimPrefix(r.URL.Path, prefix)
			r.Header.Del("Authorization")
			httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, r)
		}))
		defer apiserver.Close()
		kc := filepath.Join(t.TempDir(), "kubeconfig")
		cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: s3cret}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n", apiserver.URL)
		if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		direct, _, _ := runPlugin(t, "audit", "-A", "--prometheus", base)
		out, stderr, code := runPlugin(t, "audit", "-A", "--kubeconfig", kc, "--prometheus-service", "monitoring/prometheus:9090")
		if code != 1 || out != direct {
			t.Errorf("exit %d (want 1: node gone), table:\n%s\nwant, as --prometheus:\n%s\nstderr: %s", code, out, direct, stderr)
		}
		if len(seen) != 1 || !strings.HasPrefix(seen[0], "POST "+prefix+"/api/v1/query ") {
			t.Errorf("the API server saw %q, want one POST of %s/api/v1/query", seen, prefix)
		}
	})

	t.Run("one namespace, one node", func(t *testing.T) {
		out, stderr, code := runPlugin(t, "inspect", "-n", "default", "--node", "seed-003-k3s-spin", "--prometheus", base, "-o", "json")
		if code != 0 {
			t.Errorf("exit %d: %s", code, stderr)
		}
		doc := decodeProm(t, out, 1)
		if doc.Nodes[0].Name != "seed-003-k3s-spin" || len(doc.Nodes[0].Pods) == 0 {
			t.Fatalf("nodes %+v", doc.Nodes)
		}
		for _, p := range doc.Nodes[0].Pods {
			if p.Namespace != "default" {
				t.Errorf("-n default shows pod %s/%s", p.Namespace, p.Pod)
			}
		}
		if !strings.Contains(stderr, "old (the agent's --interval plus the scrape interval)") {
			t.Errorf("no word on how old the figures are: %q", stderr)
		}
	})
}

func decodeProm(t *testing.T, out string, nodes int) PromReport {
	t.Helper()
	var doc PromReport
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("-o json: %v: %.300s", err, out)
	}
	if doc.Source != "prometheus" || len(doc.Nodes) != nodes {
		t.Fatalf("source %q, %d nodes, want prometheus and %d: %.500s", doc.Source, len(doc.Nodes), nodes, out)
	}
	return doc
}

// comparePods checks a node's pods from Prometheus against its agent's
// /inspect.
func comparePods(t *testing.T, n PromNode, pods []inspect.PodJSON) {
	t.Helper()
	byUID := map[string]PromPod{}
	for _, p := range n.Pods {
		byUID[p.UID] = p
	}
	if len(byUID) != len(pods) || len(pods) == 0 {
		t.Errorf("node %s: %d pods from Prometheus, %d from /inspect", n.Name, len(byUID), len(pods))
	}
	same := func(a *float64, b *float64) bool {
		return (a == nil) == (b == nil) && (a == nil || math.Abs(*a-*b) <= 1e-9*math.Max(1, math.Abs(*b)))
	}
	u64 := func(v *uint64) *float64 {
		if v == nil {
			return nil
		}
		f := float64(*v)
		return &f
	}
	for _, ip := range pods {
		pp, ok := byUID[ip.UID]
		if !ok {
			t.Errorf("node %s: pod %s not in Prometheus", n.Name, ip.UID)
			continue
		}
		var weight, guaranteed, used, memory *float64
		if ip.CPU != nil {
			weight, used = u64(ip.CPU.Weight), ip.CPU.UsageCores
			g := ip.CPU.GuaranteedCores
			guaranteed = &g
		}
		if ip.Memory != nil {
			memory = u64(ip.Memory.WorkingSetBytes)
		}
		// Prometheus's pod figures are the corrected ones (docs/metrics.md:
		// the pod cgroup's own plus every container or sandbox cgroup of the
		// pod outside it); /inspect's pod figures are the pod cgroup's own.
		used, memory = plusOutside(ip, used, memory)
		if !same(pp.Weight, weight) || !same(pp.GuaranteedCores, guaranteed) || !same(pp.UsageCores, used) || !same(pp.WorkingSetBytes, memory) {
			t.Errorf("node %s pod %s: Prometheus weight %v guaranteed %v used %v memory %v; /inspect %v %v %v %v", n.Name, ip.UID,
				deref(pp.Weight), deref(pp.GuaranteedCores), deref(pp.UsageCores), deref(pp.WorkingSetBytes), deref(weight), deref(guaranteed), deref(used), deref(memory))
		}
		if c := containers(ip); c > 0 && (pp.Containers == nil || *pp.Containers != c) {
			t.Errorf("node %s pod %s: %v containers from Prometheus, %d from /inspect", n.Name, ip.UID, derefInt(pp.Containers), c)
		}
		if m := misplacedContainers(ip); pp.Misplaced != nil && *pp.Misplaced != m {
			t.Errorf("node %s pod %s: %d misplaced containers from Prometheus, %d from /inspect", n.Name, ip.UID, *pp.Misplaced, m)
		}
	}
}

// misplacedContainers counts the pod's misplaced containers, sandboxes
// left out (Prometheus has no sandbox series).
func misplacedContainers(p inspect.PodJSON) int {
	n := 0
	for _, c := range p.Containers {
		if c.Misplaced && !c.Sandbox {
			n++
		}
	}
	return n
}

func deref(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}

func derefInt(v *int) any {
	if v == nil {
		return nil
	}
	return *v
}

// plusOutside adds the pod's misplaced containers' and sandboxes' CPU and
// working set to its pod cgroup's: the corrected figures. Unknown stays
// unknown.
func plusOutside(p inspect.PodJSON, used, memory *float64) (*float64, *float64) {
	for _, c := range p.Containers {
		if !c.Misplaced {
			continue
		}
		if used != nil {
			if c.CPU.UsageCores == nil {
				used = nil
			} else {
				v := *used + *c.CPU.UsageCores
				used = &v
			}
		}
		if memory != nil {
			if c.Memory.WorkingSetBytes == nil {
				memory = nil
			} else {
				v := *memory + float64(*c.Memory.WorkingSetBytes)
				memory = &v
			}
		}
	}
	return used, memory
}

// Flags refused before anything is asked, each with what to do.
func TestFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "-n", "default", "--prometheus", "http://127.0.0.1:9"}, "add -A"},
		{[]string{"audit", "-A", "--prometheus", "127.0.0.1:9090"}, "want an http or https URL"},
		{[]string{"audit", "-A", "--prometheus", "http://x", "--prometheus-service", "monitoring/prometheus:9090"}, "give one"},
		{[]string{"inspect", "-A", "--prometheus-service", "prometheus:9090"}, "want NAMESPACE/NAME:PORT"},
		{[]string{"inspect", "-A", "--parallel", "0"}, "--parallel 0: want 1 or more"},
		{[]string{"inspect", "-A", "--timeout", "0s"}, "--timeout must be above 0"},
	} {
		_, stderr, code := runPlugin(t, c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, %q; want 1 and %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}
