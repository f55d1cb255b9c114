package scale

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/answerproof"
	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/kubectlplugin"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/serve"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// The examples each live agent serves (round robin): embedded snapshots
// with their pods files, each with findings about pods.
var pluginExamples = []string{"cgroupfs-v1-containerd", "cgroupfs-v2-crio", "seed-000-eks-neonvm", "seed-003-k3s-spin"}

// pluginAgent is one node's simulated agent for the plugin: a real
// serve.Server over an example snapshot (its pods renamed after the node,
// so that a node's findings cannot pass for another's), served on a
// loopback listener of its own; or, dead, a listener that accepts and
// reads but never answers.
type pluginAgent struct {
	node, addr string
	dead       bool
	// findings are "rule namespace/pod" of what the agent serves.
	findings []string
	// minter signs its answers as the agent's code does
	// (answerproof.Sign): with tokens the API server mints for its pod,
	// once the pod exists.
	minter atomic.Pointer[answerproof.APIMinter]
}

// Mint implements answerproof.Minter with the pod's minter.
func (a *pluginAgent) Mint(ctx context.Context, audience string) (string, error) {
	m := a.minter.Load()
	if m == nil {
		return "", fmt.Errorf("%s: no pod yet", a.node)
	}
	return m.Mint(ctx, audience)
}

// auditFindings reads "rule namespace/pod" of an /audit document.
func auditFindings(body []byte) ([]string, error) {
	var doc struct {
		Findings []struct {
			Rule    string `json:"rule"`
			Subject struct {
				PodName   string `json:"podName"`
				Namespace string `json:"namespace"`
			} `json:"subject"`
		} `json:"findings"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, err
	}
	var out []string
	for _, f := range doc.Findings {
		out = append(out, f.Rule+" "+f.Subject.Namespace+"/"+f.Subject.PodName)
	}
	slices.Sort(out)
	return out, nil
}

// startPluginAgent starts the agent of node (from any goroutine: its
// listener goes at the test's end).
func startPluginAgent(t *testing.T, node, example string, dead bool) (*pluginAgent, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &pluginAgent{node: node, addr: l.Addr().String(), dead: dead}
	if dead {
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					_, _ = io.Copy(io.Discard, c) // until the plugin hangs up
					c.Close()
				}()
			}
		}()
		return a, nil
	}
	b, ok := examples.Open(example)
	if !ok {
		return nil, fmt.Errorf("no example %s", example)
	}
	snap, err := snapshot.Load(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	pods, err := metadata.ReadPodsFile(filepath.Join("..", "..", "internal", "examples", "snapshots", example+".pods.json"))
	if err != nil {
		return nil, err
	}
	for i := range pods {
		pods[i].Name += "-" + node
	}
	s := serve.New(serve.Config{NodeName: node})
	if err := s.FeedSamples(snap.Samples, metadata.NewSet(pods)); err != nil {
		return nil, err
	}
	w := httptest.NewRecorder()
	s.LocalHandler().ServeHTTP(w, httptest.NewRequest("GET", "/audit", nil))
	if w.Code != http.StatusOK {
		return nil, fmt.Errorf("%s: /audit %d", node, w.Code)
	}
	if a.findings, err = auditFindings(w.Body.Bytes()); err != nil || !slices.ContainsFunc(a.findings, func(f string) bool { return strings.HasSuffix(f, "-"+node) }) {
		return nil, fmt.Errorf("%s (%s): findings %v (%v); want some about its pods", node, example, a.findings, err)
	}
	srv := &http.Server{Handler: answerproof.Sign(s.LocalHandler(), a, slog.Default()), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return a, nil
}

// agentPod is node's cgwarden agent pod as the DaemonSet makes it, as far
// as the plugin looks: namespace, label, node.
func agentPod(node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cgwarden-" + node, Namespace: agentNamespace,
			Labels: map[string]string{"app.kubernetes.io/name": "cgwarden"}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: agentSA, Containers: []corev1.Container{{Name: "cgwarden", Image: "cgwarden:scale"}}},
	}
}

// runPlugin runs `kubectl cgwarden args...` against the lane, reaching
// the agents at their loopback addresses; it returns stdout, stderr, the
// command's error and how long it took.
func (e *env) runPlugin(addr map[string]string, args ...string) (stdout, stderr string, err error, took time.Duration) {
	var out, errOut bytes.Buffer
	root := kubectlplugin.NewRootWith(&out, &errOut, kubectlplugin.Direct{Addr: func(a kubectlplugin.Agent) string { return addr[a.Node] }})
	root.SetArgs(append(args, "--kubeconfig", e.kubeconfig))
	t0 := time.Now()
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err, time.Since(t0)
}

// TestPluginBounded: `kubectl cgwarden audit -A` over N agents
// (CGWARDEN_SCALE_PLUGIN_AGENTS, 800) of which 5 % accept a connection and
// never answer. The command is the plugin's own (kubectlplugin.NewRootWith:
// the agent pods listed through the lane's API server, --parallel,
// --timeout, the JSON document and the summary), reaching each agent at
// its loopback address instead of a port-forward (no kubelet here to
// forward to). kwok's part: N Nodes and N agent pods Running on them,
// which the plugin finds as it finds a DaemonSet's.
//
// Laws: the whole run ends within ceil(dead / parallel) × timeout (the dead
// nodes' deadlines, in parallel) + one more timeout + 30 s for the live
// nodes' answers, well under the dead nodes' deadlines one after the
// other; every dead node is named, with "no answer within"; every live
// node's findings are in the document as its agent served them. Then
// `audit -n NS` for a namespace with pods on 11 nodes asks those 11
// agents and no other.
func TestPluginBounded(t *testing.T) {
	e := lane(t)
	e.setup(t)
	n := envInt(t, "CGWARDEN_SCALE_PLUGIN_AGENTS", 800)
	parallel := envInt(t, "CGWARDEN_SCALE_PLUGIN_PARALLEL", 16)
	timeout := envDuration(t, "CGWARDEN_SCALE_PLUGIN_TIMEOUT", 8*time.Second)
	isDead := func(i int) bool { return i%20 == 3 } // 5 %
	e.makeNodes(t, n)
	ctx := context.Background()
	t.Cleanup(func() {
		zero := int64(0)
		if err := e.cs.CoreV1().Pods(agentNamespace).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero},
			metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cgwarden"}); err != nil {
			t.Errorf("deleting the agent pods: %v", err)
		}
	})
	agents := make([]*pluginAgent, n)
	t0 := time.Now()
	if err := bulk(n, 4, func(i int) (err error) {
		agents[i], err = startPluginAgent(t, nodeName(i), pluginExamples[i%len(pluginExamples)], isDead(i))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	addr := map[string]string{}
	dead := 0
	for i, a := range agents {
		addr[a.node] = a.addr
		if isDead(i) {
			dead++
		}
	}
	t.Logf("%d agents serving in %v", n, time.Since(t0).Round(time.Millisecond))
	// The reader whose tokens the plugin asks for (deploy/kustomize/base
	// plugin.yaml); the agents' answers are signed with tokens of their
	// pods' ServiceAccount, minted by the API server as an agent mints
	// them (the lane's admin stands in for the agent's identity).
	if _, err := e.cs.CoreV1().ServiceAccounts(agentNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: answerproof.DefaultReader}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	err := bulk(n, 32, func(i int) error {
		p, err := e.cs.CoreV1().Pods(agentNamespace).Create(ctx, agentPod(nodeName(i)), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		m, err := answerproof.NewAPIMinter(e.admin, answerproof.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), ServiceAccount: p.Spec.ServiceAccountName})
		if err != nil {
			return err
		}
		agents[i].minter.Store(m)
		if !e.kwok {
			return e.podRunning(ctx, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, 5*time.Minute, fmt.Sprintf("%d agent pods Running (kwok)", n), agentNamespace, "app.kubernetes.io/name=cgwarden", n)

	flags := []string{"-o", "json", "--parallel", fmt.Sprint(parallel), "--timeout", timeout.String()}
	stdout, stderr, runErr, took := e.runPlugin(addr, append([]string{"audit", "-A"}, flags...)...)
	bound := time.Duration((dead+parallel-1)/parallel+1)*timeout + 30*time.Second
	record(t, "plugin-bounded", map[string]any{"agents": n, "dead": dead, "parallel": parallel, "timeoutSeconds": timeout.Seconds(),
		"seconds": took.Seconds(), "boundSeconds": bound.Seconds(),
		"deadlinesInParallelSeconds":      (time.Duration((dead+parallel-1)/parallel) * timeout).Seconds(),
		"deadlinesOneAfterAnotherSeconds": (time.Duration(dead) * timeout).Seconds()})
	if took > bound {
		t.Errorf("kubectl cgwarden audit -A over %d agents (%d dead) took %v; want at most %v (ceil(%d/%d) deadlines of %v, one more, and 30 s)",
			n, dead, took.Round(time.Millisecond), bound, dead, parallel, timeout)
	}
	wantSummary := fmt.Sprintf("%d of %d nodes answered; %d gave no answer within --timeout, 0 failed otherwise", n-dead, n, dead)
	if runErr == nil || !strings.Contains(runErr.Error(), wantSummary) {
		t.Errorf("the command's error %v; want the summary %q", runErr, wantSummary)
	}
	var doc kubectlplugin.ClusterReport
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("-o json: %v\n%.2000s", err, stdout)
	}
	if len(doc.Nodes) != n {
		t.Fatalf("%d nodes in the document, want %d", len(doc.Nodes), n)
	}
	byNode := map[string]kubectlplugin.NodeReport{}
	for _, nr := range doc.Nodes {
		byNode[nr.Name] = nr
	}
	bad := 0
	for _, a := range agents {
		nr, ok := byNode[a.node]
		var problem string
		switch {
		case !ok:
			problem = "not in the document"
		case a.dead && !strings.Contains(nr.Error, "no answer within "+timeout.String()):
			problem = fmt.Sprintf("dead, reported as %q", nr.Error)
		case a.dead && !strings.Contains(stderr, "node "+a.node+": no answer within"):
			problem = "dead, not named on stderr"
		case !a.dead && nr.Error != "":
			problem = "live, reported as " + nr.Error
		case !a.dead:
			got, err := auditFindings(nr.Report)
			if err != nil || !slices.Equal(got, a.findings) {
				problem = fmt.Sprintf("findings %v (%v), its agent served %v", got, err, a.findings)
			}
		}
		if problem != "" {
			if bad++; bad <= 10 {
				t.Errorf("node %s: %s", a.node, problem)
			}
		}
	}
	if bad > 10 {
		t.Errorf("... %d nodes in all", bad)
	}

	// -n: one pod LIST, and only the nodes that run the namespace's pods.
	ns := e.testNamespace(t, "plugin")
	var on []string
	for i := 0; i < n; i += max(1, n/10) {
		on = append(on, nodeName(i))
	}
	on = append(on, nodeName(3)) // and a dead one
	err = bulk(len(on), 16, func(i int) error {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app-" + on[i], Namespace: ns},
			Spec: corev1.PodSpec{NodeName: on[i], Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		got, err := e.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err == nil && !e.kwok {
			err = e.podRunning(ctx, got)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, 2*time.Minute, fmt.Sprintf("%d pods Running in %s (kwok)", len(on), ns), ns, "", len(on))
	stdout, stderr, runErr, took = e.runPlugin(addr, append([]string{"audit", "-n", ns}, flags...)...)
	doc = kubectlplugin.ClusterReport{}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("-n %s -o json: %v (%v)\n%s", ns, err, runErr, stderr)
	}
	var asked []string
	for _, nr := range doc.Nodes {
		asked = append(asked, nr.Name)
	}
	slices.Sort(asked)
	slices.Sort(on)
	if !slices.Equal(asked, on) {
		t.Errorf("audit -n %s asked %d nodes %v; want the %d that run its pods %v", ns, len(asked), asked, len(on), on)
	}
	if want := fmt.Sprintf("asking %d of %d agents", len(on), n); !strings.Contains(stderr, want) {
		t.Errorf("audit -n %s: stderr does not say %q:\n%s", ns, want, stderr)
	}
	record(t, "plugin-namespace", map[string]any{"agents": n, "asked": len(asked), "seconds": took.Seconds()})
}
