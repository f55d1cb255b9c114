package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// The lane's Prometheus scrapes and evaluates every promInterval, and the
// alerts under test wait promFor instead of their shipped minutes (the
// expressions are the shipped ones; only `for:` is shortened, so that the
// test takes seconds per alert instead of a quarter of an hour).
const (
	promInterval = 5 * time.Second
	promFor      = 20 * time.Second
)

// TestPrometheusAlertsOnTheSeeds: Debian's Prometheus, configured with
// deploy/prometheus/scrape.yaml as shipped (Kubernetes pod discovery, a
// ServiceAccount token allowed get on nodes/metrics, honor_labels, the
// node relabel) and deploy/prometheus/cgwarden.rules.yaml, scrapes the
// lane's agent over HTTPS, cgwarden nri's metrics the agent relays
// (/metrics/nri) and the sizer (deploy/kustomize/sizer). Both seeds' bugs
// fire their alerts, with the node, namespace and pod as labels, within
// two evaluation intervals after their `for`: a container of the misplace
// runtime outside its pod (CgwardenMisplacedContainer) and a BestEffort
// pod that declares a core and is guaranteed next to nothing
// (CgwardenVMStarved). Switching the agent to `serve --fix` (adoption,
// weights by size) resolves both. Meanwhile the NRI plugin places a pod
// of the misplace runtime and the sizer admits and resizes a VM's runner
// pod. Every query of the shipped dashboard runs without error and
// returns data in one of the two phases.
func TestPrometheusAlertsOnTheSeeds(t *testing.T) {
	bin := prometheusBinary(t)
	e := cluster(t)
	ctx := context.Background()
	importAgentImage(t)
	ns := e.namespace(t)

	e.misplacedDeployment(t, ns, "busy", 1, burner)
	// The sizer, its webhook for namespace vmNS, while the pods start.
	ensureCRD(t, dynamicClient(t, e))
	sizerNS, vmNS := e.namespace(t), e.namespace(t)
	e.installSizer(t, sizerNS, vmNS)
	var busy *corev1.Pod
	for _, p := range e.runningPods(t, ns, "busy", 1, 120*time.Second) {
		busy = p
	}
	zero := int64(1)
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-1", Annotations: map[string]string{"cgwarden.io/cpu": "1000m"}},
		Spec: corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: &zero, Containers: []corev1.Container{{
			Name: "vm", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 120*time.Second, "pod vm-1 running", func() (bool, string, error) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, "vm-1", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return p.Status.Phase == corev1.PodRunning, describe(p), nil
	})

	// Observe-only, believing the test's size annotations, with cgwarden
	// nri beside it placing the misplace runtime's new containers (busy's
	// was created before).
	e.installAgent(t, "testdata/agent-prom")
	// Pod discovery as the lane has it: the agent where it is; the sizer
	// in the test's namespace, on the host's loopback (installSizer).
	prom := e.startPrometheus(t, bin, ns, map[string]standIn{
		"cgwarden-system": {namespace: "cgwarden-system"},
		"cgwarden-sizer":  {namespace: sizerNS, host: "127.0.0.1"},
	})
	for _, job := range []string{"cgwarden", "cgwarden-nri", "cgwarden-sizer"} {
		poll.Until(t, 60*time.Second, "Prometheus scraping job "+job, func() (bool, string, error) {
			v, err := prom.query(`up{job="` + job + `"}`)
			return len(v) == 1 && v[0].Value[1] == "1", fmt.Sprint(v), err
		})
	}
	poll.Until(t, 60*time.Second, "cgwarden nri registered, through Prometheus", func() (bool, string, error) {
		v, err := prom.query(`cgwarden_nri_connected{node="` + e.node + `"} == 1`)
		return len(v) == 1, fmt.Sprint(v), err
	})
	// A pod the plugin places, and a VM's runner pod the sizer sizes at
	// admission and resizes when the VM grows: their series while the
	// alerts are pending.
	placed := e.startNRIPod(t, ns, "placed", misplaceClass)
	e.sizeAndResizeVM(t, vmNS)

	misplaced := map[string]string{"node": e.node, "namespace": ns, "pod": busy.Name}
	starved := map[string]string{"node": e.node, "namespace": ns, "pod": "vm-1"}
	prom.waitFiring(t, map[string]map[string]string{"CgwardenMisplacedContainer": misplaced, "CgwardenVMStarved": starved})
	for q, what := range map[string]string{
		`cgwarden_nri_containers_total{handler="misplace", node="` + e.node + `"} > 0`: "pod " + placed.pod.Name + " counted by cgwarden nri",
		`cgwarden_pod_misplaced{pod="` + placed.pod.Name + `"} == 0`:                   "pod " + placed.pod.Name + " in its pod cgroup",
		`cgwarden_sizer_admissions_total{result="sized"} > 0`:                          "a runner pod sized at admission",
		`cgwarden_sizer_resizes_total{result="resized"} > 0`:                           "a runner pod resized",
	} {
		poll.Until(t, 60*time.Second, what+", through Prometheus: "+q, func() (bool, string, error) {
			v, err := prom.query(q)
			return len(v) > 0, fmt.Sprint(v), err
		})
	}
	observed := prom.dashboardQueries(t, e.node)
	// Their counts are in; the pods go, so that the fix phase weighs the
	// seeds' pods against what it did before (the runner pod's 1500m in the
	// Burstable tier held vm-1 below half its core for a minute longer).
	now := int64(0)
	for _, p := range []struct{ ns, name string }{{vmNS, "vm1-runner"}, {ns, placed.pod.Name}} {
		if err := e.cs.CoreV1().Pods(p.ns).Delete(ctx, p.name, metav1.DeleteOptions{GracePeriodSeconds: &now}); err != nil {
			t.Fatal(err)
		}
	}

	// serve --fix: adoption and weights by size.
	if out, err := runKubectl(e, "apply", "-k", "testdata/agent-prom-fix"); err != nil {
		t.Fatalf("kubectl apply -k testdata/agent-prom-fix: %v\n%s", err, out)
	}
	e.agentsFixing(t, 1)
	// Resolved because the agent's figures changed, not because a series
	// went stale while the DaemonSet replaced its pod.
	sel := func(pod string) string { return fmt.Sprintf(`{node=%q, namespace=%q, pod=%q}`, e.node, ns, pod) }
	prom.waitResolved(t, "CgwardenMisplacedContainer", misplaced, "cgwarden_pod_misplaced"+sel(busy.Name), " == 0")
	prom.waitResolved(t, "CgwardenVMStarved", starved, "cgwarden_pod_cpu_guaranteed_cores"+sel("vm-1")+" / cgwarden_pod_cpu_declared_cores"+sel("vm-1"), " >= 0.5")
	// Two scrapes more, for the rates of the fix-mode series.
	time.Sleep(3 * promInterval)
	fixed := prom.dashboardQueries(t, e.node)

	var missing []string
	for q, panel := range observed.panel {
		if observed.series[q] == 0 && fixed.series[q] == 0 {
			missing = append(missing, fmt.Sprintf("%q: %s", panel, q))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		t.Errorf("dashboard queries with no data with the agent observing nor fixing:\n%s", strings.Join(missing, "\n"))
	}
}

// prometheusBinary is Debian's prometheus; without it the test skips
// (fails with CGWARDEN_REQUIRE_REAL=1).
func prometheusBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		msg := "no prometheus binary (Debian package prometheus; .ci/run installs it)"
		if os.Getenv("CGWARDEN_REQUIRE_REAL") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// prometheus is a Prometheus server the test started.
type prometheus struct {
	base string
}

// standIn is where the lane has the pods that Kubernetes pod discovery
// would find in a namespace a scrape job names: the namespace they are
// in here, and host, when set, the address their ports are served on
// instead of the pod's IP (a pod the lane moved onto the host's
// loopback).
type standIn struct {
	namespace, host string
}

// startPrometheus runs bin on a loopback port with
// deploy/prometheus/scrape.yaml and the shipped rules (their `for:` set
// to promFor), its jobs' pods discovered where lane says the shipped
// namespaces' pods are (a namespace lane lacks has none), with the token
// of a ServiceAccount of ns allowed what the file says it needs.
func (e *env) startPrometheus(t *testing.T, bin, ns string, lane map[string]standIn) *prometheus {
	t.Helper()
	dir := t.TempDir()
	token := e.nodeReaderToken(t, ns, "prometheus", "nodes/metrics")
	write := func(name string, b []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokenFile := write("token", []byte(token))

	rules, err := os.ReadFile("../../deploy/prometheus/cgwarden.rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rules = regexp.MustCompile(`(?m)^(\s+for:) \S+$`).ReplaceAll(rules, []byte("$1 "+promFor.String()))
	write("cgwarden.rules.yaml", rules)

	var cfg map[string]any
	b, err := os.ReadFile("../../deploy/prometheus/scrape.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("deploy/prometheus/scrape.yaml: %v", err)
	}
	// Debian builds Prometheus without Kubernetes discovery: the test
	// discovers each job's pods as role: pod would (the same __meta_
	// labels, one target per container port) and hands them over in a
	// file, so that the shipped relabel_configs, honor_labels and
	// authentication are what select and label the targets.
	for _, sc := range cfg["scrape_configs"].([]any) {
		sc := sc.(map[string]any)
		job := fmt.Sprint(sc["job_name"])
		if _, ok := sc["authorization"]; ok {
			sc["authorization"] = map[string]any{"credentials_file": tokenFile}
		}
		var sd []struct {
			Role       string `json:"role"`
			Namespaces struct {
				Names []string `json:"names"`
			} `json:"namespaces"`
		}
		if err := remarshal(sc["kubernetes_sd_configs"], &sd); err != nil || len(sd) != 1 || sd[0].Role != "pod" {
			t.Fatalf("deploy/prometheus/scrape.yaml: job %s: want one kubernetes_sd_configs of role pod to stand in for (%v)", job, err)
		}
		var groups []targetGroup
		for _, name := range sd[0].Namespaces.Names {
			// A namespace the test runs nothing of: no pods, no targets.
			if where, ok := lane[name]; ok {
				groups = append(groups, e.podTargets(t, where)...)
			}
		}
		tb, err := json.Marshal(groups)
		if err != nil {
			t.Fatal(err)
		}
		delete(sc, "kubernetes_sd_configs")
		sc["file_sd_configs"] = []any{map[string]any{"files": []any{write("targets-"+job+".json", tb)}}}
	}
	cfg["global"] = map[string]any{"scrape_interval": promInterval.String(), "evaluation_interval": promInterval.String()}
	b, err = yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	config := write("prometheus.yml", b)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s\nconfig:\n%s", tail(string(b), 30), must(os.ReadFile(config)))
		}
		logf.Close()
	})
	p := &prometheus{base: "http://" + addr}
	poll.Until(t, 60*time.Second, "Prometheus ready", func() (bool, string, error) {
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	return p
}

func must(b []byte, _ error) string { return string(b) }

// promValue is the one value of an instant query (the test fails
// otherwise).
func promValue(t *testing.T, p *prometheus, expr string) float64 {
	t.Helper()
	v, err := p.query(expr)
	if err != nil || len(v) != 1 {
		t.Fatalf("%s: %v %v, want one series", expr, v, err)
	}
	f, err := strconv.ParseFloat(fmt.Sprint(v[0].Value[1]), 64)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return f
}

// agentsFixing waits until the agent DaemonSet has n pods (one per node),
// each Ready and run with --fix.
func (e *env) agentsFixing(t *testing.T, n int) {
	t.Helper()
	poll.Until(t, 4*time.Minute, fmt.Sprintf("the agent in fix mode Ready on %d nodes", n), func() (bool, string, error) {
		pods, err := e.cs.CoreV1().Pods("cgwarden-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cgwarden"})
		if err != nil || len(pods.Items) != n {
			return false, fmt.Sprintf("%d agent pods", len(pods.Items)), err
		}
		for _, p := range pods.Items {
			ready := slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue })
			if !ready || !slices.ContainsFunc(p.Spec.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--fix=") }) {
				return false, describe(&p), nil
			}
		}
		return true, "", nil
	})
}

// remarshal converts a decoded YAML value into out through JSON.
func remarshal(v, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// targetGroup is one group of a file_sd file.
type targetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// podTargets are the file_sd targets Kubernetes pod discovery (role:
// pod) would give for the pods of where.namespace: one per container
// port, and one without a port (the pod's IP alone) for a container that
// declares none (the agent: docs/deploy.md, "Updates"), with the __meta_
// labels scrape.yaml relabels (pod labels and annotations among them).
func (e *env) podTargets(t *testing.T, where standIn) []targetGroup {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods(where.namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`[^a-zA-Z0-9_]`)
	var groups []targetGroup
	for _, p := range pods.Items {
		host := p.Status.PodIP
		if where.host != "" {
			host = where.host
		}
		for _, c := range p.Spec.Containers {
			labelsOf := func(portName string) map[string]string {
				labels := map[string]string{
					"__meta_kubernetes_namespace":          p.Namespace,
					"__meta_kubernetes_pod_name":           p.Name,
					"__meta_kubernetes_pod_node_name":      p.Spec.NodeName,
					"__meta_kubernetes_pod_container_name": c.Name,
				}
				if portName != "" {
					labels["__meta_kubernetes_pod_container_port_name"] = portName
				}
				for k, v := range p.Labels {
					labels["__meta_kubernetes_pod_label_"+name.ReplaceAllString(k, "_")] = v
				}
				for k, v := range p.Annotations {
					labels["__meta_kubernetes_pod_annotation_"+name.ReplaceAllString(k, "_")] = v
				}
				return labels
			}
			if len(c.Ports) == 0 {
				groups = append(groups, targetGroup{Targets: []string{host}, Labels: labelsOf("")})
			}
			for _, port := range c.Ports {
				groups = append(groups, targetGroup{Targets: []string{net.JoinHostPort(host, fmt.Sprint(port.ContainerPort))}, Labels: labelsOf(port.Name)})
			}
		}
	}
	return groups
}

// sample is one series of an instant query's vector.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// get decodes the data of a Prometheus API answer into out.
func (p *prometheus) get(path string, q url.Values, out any) error {
	resp, err := http.Get(p.base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s %s: %s", path, q.Encode(), body.Error)
	}
	return json.Unmarshal(body.Data, out)
}

// query runs an instant PromQL query; a matrix or scalar is an error.
func (p *prometheus) query(expr string) ([]sample, error) {
	var data struct {
		ResultType string   `json:"resultType"`
		Result     []sample `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: a %s, not a vector", expr, data.ResultType)
	}
	return data.Result, nil
}

// alert is one of /api/v1/alerts.
type alert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
}

// alert returns the active (pending or firing) alert name whose labels
// include want, if there is one.
func (p *prometheus) alert(name string, want map[string]string) (*alert, error) {
	var data struct {
		Alerts []alert `json:"alerts"`
	}
	if err := p.get("/api/v1/alerts", nil, &data); err != nil {
		return nil, err
	}
	for _, a := range data.Alerts {
		match := a.Labels["alertname"] == name
		for k, v := range want {
			match = match && a.Labels[k] == v
		}
		if match {
			return &a, nil
		}
	}
	return nil, nil
}

// firstFiring is the time of the first sample of ALERTS{labels,
// alertstate="firing"} in the last five minutes: the evaluation at which
// the alert fired.
func (p *prometheus) firstFiring(labels map[string]string) (time.Time, error) {
	var sel []string
	for k, v := range labels {
		sel = append(sel, fmt.Sprintf("%s=%q", k, v))
	}
	slices.Sort(sel)
	expr := "ALERTS{" + strings.Join(append(sel, `alertstate="firing"`), ", ") + "}[5m]"
	var data struct {
		Result []struct {
			Values [][2]any `json:"values"`
		} `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return time.Time{}, err
	}
	if len(data.Result) != 1 || len(data.Result[0].Values) == 0 {
		return time.Time{}, fmt.Errorf("%s: %d series, want one with samples", expr, len(data.Result))
	}
	sec, ok := data.Result[0].Values[0][0].(float64)
	if !ok {
		return time.Time{}, fmt.Errorf("%s: a sample's time %v", expr, data.Result[0].Values[0][0])
	}
	return time.UnixMilli(int64(sec * 1000)), nil
}

// waitFiring waits for each alert (name: labels it must have) to fire,
// and checks each fired within two evaluation intervals after its `for`
// (and a second of polling) from when it became pending.
func (p *prometheus) waitFiring(t *testing.T, alerts map[string]map[string]string) {
	t.Helper()
	fired := map[string]time.Time{}
	poll.Until(t, 3*time.Minute, fmt.Sprintf("alerts firing: %v", alerts), func() (bool, string, error) {
		var state []string
		for name, want := range alerts {
			if _, ok := fired[name]; ok {
				continue
			}
			a, err := p.alert(name, want)
			switch {
			case err != nil:
				return false, "", err
			case a == nil:
				state = append(state, name+" inactive")
			case a.State != "firing":
				state = append(state, name+" "+a.State)
			default:
				fired[name] = time.Now()
				// When it fired is Prometheus' own record, its first
				// ALERTS sample in the firing state: this poll, on a
				// busy host, sees it seconds later.
				at, err := p.firstFiring(a.Labels)
				if err != nil {
					return false, "", err
				}
				late := at.Sub(a.ActiveAt) - promFor
				t.Logf("%s firing %v after it became pending (for: %v; seen here %v after), labels %v", name, at.Sub(a.ActiveAt).Round(100*time.Millisecond), promFor,
					time.Since(a.ActiveAt).Round(100*time.Millisecond), a.Labels)
				if late > 2*promInterval+time.Second {
					t.Errorf("%s fired %v after its `for`, want within two evaluation intervals (%v)", name, late.Round(100*time.Millisecond), 2*promInterval)
				}
			}
		}
		return len(fired) == len(alerts), strings.Join(state, ", "), nil
	})
}

// waitResolved waits until alert name with labels want is neither pending
// nor firing while the query value+healthy, which says why, returns a
// series; while the alert is active, value's series go into the message.
func (p *prometheus) waitResolved(t *testing.T, name string, want map[string]string, value, healthy string) {
	t.Helper()
	start := time.Now()
	poll.Until(t, 3*time.Minute, name+" resolved for "+fmt.Sprint(want)+" with "+value+healthy, func() (bool, string, error) {
		a, err := p.alert(name, want)
		if err != nil {
			return false, "", err
		}
		if a != nil {
			// The value the alert is on, for the failure's message.
			v, err := p.query(value)
			return false, fmt.Sprintf("%v; %s: %v", a, value, v), err
		}
		v, err := p.query(value + healthy)
		return len(v) > 0, fmt.Sprintf("alert inactive; %s%s: %v", value, healthy, v), err
	})
	t.Logf("%s resolved %v after the agent was switched to fix mode", name, time.Since(start).Round(time.Second))
}

// panelQueries is what the dashboard's queries returned: series per query
// and each query's panel.
type panelQueries struct {
	series map[string]int
	panel  map[string]string
}

// dashboardQueries runs every query of the shipped dashboard with node
// chosen and every namespace; a query Prometheus refuses fails the test.
func (p *prometheus) dashboardQueries(t *testing.T, node string) panelQueries {
	t.Helper()
	b, err := os.ReadFile("../../deploy/prometheus/dashboards/cgwarden.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string  `json:"title"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	// $node as Grafana puts it in a regex matcher: escaped for the regex,
	// and its backslashes for PromQL's double-quoted string (a node named
	// by its address, 127.0.0.1, has dots).
	quoted := strings.ReplaceAll(regexp.QuoteMeta(node), `\`, `\\`)
	vars := strings.NewReplacer(`$node`, quoted, `$namespace`, ".*", `$__rate_interval`, "1m", `$__interval`, promInterval.String())
	out := panelQueries{series: map[string]int{}, panel: map[string]string{}}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, pn := range ps {
			walk(pn.Panels)
			for _, tg := range pn.Targets {
				q := vars.Replace(tg.Expr)
				v, err := p.query(q)
				if err != nil {
					t.Errorf("dashboard panel %q: %v", pn.Title, err)
				}
				out.series[tg.Expr] += len(v)
				out.panel[tg.Expr] = pn.Title
			}
		}
	}
	walk(d.Panels)
	if len(out.panel) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}
