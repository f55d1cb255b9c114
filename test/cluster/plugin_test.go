package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// installAgent applies a kustomization of the agent, waits for its pod to
// be Ready (60 s) and deletes it after the test.
func installAgent(t *testing.T, e *env, dir string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	importAgentImage(t)
	if out, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "apply", "-k", dir).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -k %s: %v\n%s", dir, err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "logs", "-n", "cgwarden-system", "-l", "app.kubernetes.io/name=cgwarden", "--tail", "60").CombinedOutput()
			t.Logf("the agent's log:\n%s", logs)
		}
		out, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "delete", "-k", dir, "--wait=true", "--timeout=120s").CombinedOutput()
		if err != nil {
			t.Logf("kubectl delete -k %s: %v\n%s", dir, err, out)
		}
	})
	var agent corev1.Pod
	poll.Until(t, 60*time.Second, "the agent Ready", func() (bool, string, error) {
		pods, err := e.cs.CoreV1().Pods("cgwarden-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cgwarden"})
		if err != nil {
			return false, "", err
		}
		if len(pods.Items) != 1 {
			return false, fmt.Sprintf("%d agent pods", len(pods.Items)), nil
		}
		agent = pods.Items[0]
		for _, c := range agent.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, "", nil
			}
		}
		return false, describe(&agent), nil
	})
	return &agent
}

// buildPlugin builds kubectl-cgwarden into a directory of its own, for PATH.
func buildPlugin(t *testing.T) string {
	t.Helper()
	dir, err := buildOnce("kubectl-cgwarden", func(dir string) (string, error) {
		build := exec.Command("go", "build", "-o", filepath.Join(dir, "kubectl-cgwarden"), "./cmd/kubectl-cgwarden")
		build.Dir = "../.."
		if out, err := build.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building kubectl-cgwarden: %v\n%s", err, out)
		}
		return dir, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// plugin runs `kubectl cgwarden args...` (kubectl finds the plugin on
// PATH) with kubeconfig in $KUBECONFIG.
func (e *env) plugin(t *testing.T, dir, kubeconfig string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(e.kubectl, append([]string{"cgwarden"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig)
	var o, eb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &eb
	err = cmd.Run()
	return o.String(), eb.String(), err
}

// pluginDoc is kubectl cgwarden -o json, as far as the test reads it.
type pluginDoc struct {
	Kind  string `json:"kind"`
	Nodes []struct {
		Name     string          `json:"name"`
		AgentPod string          `json:"agentPod"`
		Report   json.RawMessage `json:"report"`
		Error    string          `json:"error"`
	} `json:"nodes"`
}

// auditFindings is a findings list as (rule severity subject) lines,
// sorted: what must be the same however the audit was reached.
func auditFindings(t *testing.T, b []byte) []string {
	t.Helper()
	var r struct {
		Findings []struct {
			Rule, Severity string
			Subject        map[string]string
		} `json:"findings"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("audit JSON: %v: %.300s", err, b)
	}
	var out []string
	for _, f := range r.Findings {
		s := f.Subject
		out = append(out, strings.Join([]string{f.Rule, f.Severity, s["kind"], s["namespace"], s["podName"], s["containerName"], s["containerID"], s["cgroup"]}, " "))
	}
	sort.Strings(out)
	return out
}

// inspectPod is the part of an inspect -o json pod the test compares.
type inspectPod struct {
	UID, QoS, Cgroup string
	Name, Namespace  string
	CPU              struct {
		Weight          uint64  `json:"weight"`
		GuaranteedCores float64 `json:"guaranteedCores"`
	} `json:"cpu"`
	Memory struct {
		WorkingSetBytes float64 `json:"workingSetBytes"`
	} `json:"memory"`
	Containers []inspectContainer `json:"containers"`
}

type inspectContainer struct {
	ID, Cgroup string
	Misplaced  bool
}

func inspectPods(t *testing.T, b []byte) map[string]inspectPod {
	t.Helper()
	var r struct {
		Pods []inspectPod `json:"pods"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("inspect JSON: %v: %.300s", err, b)
	}
	out := map[string]inspectPod{}
	for _, p := range r.Pods {
		out[p.Namespace+"/"+p.Name] = p
	}
	return out
}

// saKubeconfig writes a kubeconfig for ServiceAccount ns/sa (a token of
// its own) against the lane's API server.
func (e *env) saKubeconfig(t *testing.T, ns, sa string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := e.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := e.cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientcmd.LoadFromFile(e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["lane"] = cluster
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts[sa] = &clientcmdapi.Context{Cluster: "lane", AuthInfo: sa, Namespace: ns}
	cfg.CurrentContext = sa
	path := filepath.Join(t.TempDir(), sa+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// grant binds a Role in the agent's namespace with rules to ns/sa.
func (e *env) grant(t *testing.T, ns, sa string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	name := "cgwarden-test-" + ns + "-" + sa
	if _, err := e.cs.RbacV1().Roles("cgwarden-system").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.RbacV1().RoleBindings("cgwarden-system").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// grantNodes lets ns/sa get the node subresources given (nodes/stats:
// what the agent asks of a reader of /audit and /inspect), by a
// ClusterRole and binding removed at cleanup.
func (e *env) grantNodes(t *testing.T, ns, sa string, resources ...string) {
	t.Helper()
	ctx := context.Background()
	role := "cgwarden-test-nodes-" + sa + "-" + ns
	if _, err := e.cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: resources, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cs.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{}) })
	if _, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), role, metav1.DeleteOptions{})
	})
}

// pluginRules are what kubectl cgwarden needs in the agent's namespace:
// get: port-forward over WebSockets (kubectl's since v1.31, and the
// plugin's first try) is a GET; create: over SPDY, a POST.
var (
	pluginRead    = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}
	pluginForward = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: []string{"get", "create"}}
)

// TestKubectlPlugin: with the agent installed from the kustomize base,
// `kubectl cgwarden inspect|audit` (the built plugin, found by kubectl on
// PATH) reaches the node's agent through pods/portforward with a
// ServiceAccount token allowed the port-forward and nodes/stats (the
// agent checks the token on its loopback listener too; the lane's admin
// signs in with a client certificate, has no token to send, and is told
// so), and shows the node and the pods this test made; its
// findings for them are those of `cgwarden audit` run on the host against
// the same node, and its pods' weights, cgroups and containers those of
// `cgwarden inspect`. With a ServiceAccount's token: without list on the
// agent's pods, or without pods/portforward, it fails and says what RBAC
// it needs (pods, pods/portforward, nodes/stats); with all three, it works.
func TestKubectlPlugin(t *testing.T) {
	e := cluster(t)
	agent := installAgent(t, e, "testdata/agent")
	e.keepsReady(t, "the base (testdata/agent)", "cgwarden-system", "app.kubernetes.io/name=cgwarden")
	dir := buildPlugin(t)
	bin := buildCgwarden(t)
	ns := e.namespace(t)
	kc := e.saKubeconfig(t, ns, "plugin-user")
	e.bindPluginUser(t, ns, "plugin-user")
	// A little CPU, in bursts (the machine is shared).
	// A Burstable pod that asks for half a CPU and uses none: the
	// BestEffort tier's weight (2) against the Burstable tier's (over
	// 512) leaves each BestEffort pod far below besteffort-starvation's
	// 0.05 cores, a finding both audits must report.
	e.runBurstable(t, ns, "reserver", "exec sleep 3600", "500m", "", "")
	busy := e.runPod(t, ns, "busy", `while true; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 0.5; done`)
	sleeper := e.runPod(t, ns, "sleeper", "exec sleep 3600")

	// The agent scans every 10 s: wait for a scan that has both pods with
	// their running containers. (A scan that had the pod cgroup but not
	// yet the container's showed sleeper with no container and 0 bytes,
	// against the host's fresh scan, once.)
	running := map[string]string{}
	for _, p := range []*corev1.Pod{busy, sleeper} {
		got, err := e.cs.CoreV1().Pods(ns).Get(context.Background(), p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.ContainerStatuses) != 1 || got.Status.ContainerStatuses[0].ContainerID == "" {
			t.Fatalf("pod %s running without its container's ID: %+v", p.Name, got.Status.ContainerStatuses)
		}
		_, id, _ := strings.Cut(got.Status.ContainerStatuses[0].ContainerID, "://")
		running[ns+"/"+p.Name] = id
	}
	var inv pluginDoc
	poll.Until(t, 60*time.Second, "both pods in kubectl cgwarden inspect, with their running containers", func() (bool, string, error) {
		out, stderr, err := e.plugin(t, dir, kc, "inspect", "-n", ns, "-o", "json")
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, stderr), nil
		}
		inv = pluginDoc{}
		if err := json.Unmarshal([]byte(out), &inv); err != nil {
			return false, "", fmt.Errorf("kubectl cgwarden inspect -o json: %v: %.300s", err, out)
		}
		if len(inv.Nodes) != 1 || inv.Nodes[0].Error != "" {
			return false, out, nil
		}
		pods := inspectPods(t, inv.Nodes[0].Report)
		for k, id := range running {
			p, ok := pods[k]
			if !ok || !slices.ContainsFunc(p.Containers, func(c inspectContainer) bool { return c.ID == id }) {
				return false, fmt.Sprintf("%d pods; %s: %+v", len(pods), k, p.Containers), nil
			}
		}
		return true, "", nil
	})
	n := inv.Nodes[0]
	if n.Name != e.node || n.AgentPod != "cgwarden-system/"+agent.Name {
		t.Errorf("node %q agent %q, want %q and cgwarden-system/%s", n.Name, n.AgentPod, e.node, agent.Name)
	}
	pods := inspectPods(t, n.Report)
	for k := range pods {
		if !strings.HasPrefix(k, ns+"/") {
			t.Errorf("-n %s shows pod %s", ns, k)
		}
	}
	for _, p := range []*corev1.Pod{busy, sleeper} {
		if got := pods[ns+"/"+p.Name]; got.UID != string(p.UID) || got.QoS != "besteffort" {
			t.Errorf("pod %s: uid %s qos %s, want %s besteffort", p.Name, got.UID, got.QoS, p.UID)
		}
	}
	comparePluginWithHost(t, e, dir, kc, bin, ns)
	checkPluginTables(t, e, dir, kc, ns, agent)
	checkPluginNamespace(t, e, dir, kc, ns)
	checkPluginRBAC(t, e, dir, ns)
	// The lane's admin signs in with a client certificate, which no
	// node could be sent: the API server mints the reader's token for it
	// as for anyone allowed.
	if out, stderr, err := e.plugin(t, dir, e.kubeconfig, "audit", "-A"); err != nil || !strings.Contains(out, e.node+" ") {
		t.Errorf("a client-certificate user: %v: %s %s", err, out, stderr)
	}
	checkSquatter(t, e, dir, kc)
	checkAnswerTokenPolicy(t, e, agent)
}

// bindPluginUser binds the Role and ClusterRole cgwarden-plugin-user the
// base ships (plugin.yaml) to ServiceAccount ns/sa, as an administrator
// would for the plugin's users.
func (e *env) bindPluginUser(t *testing.T, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	name := "cgwarden-test-plugin-" + ns + "-" + sa
	subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}
	if _, err := e.cs.RbacV1().RoleBindings("cgwarden-system").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "cgwarden-plugin-user"}, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cgwarden-plugin-user"}, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// checkSquatter: a process that listens on the node's loopback where the
// plugin expects the agent (here port 9539, --agent-port) receives no
// credential of the user's — only a token the API server itself refuses,
// of cgwarden-reader, for the agent's audience, bound to this node — and
// its forged answer is refused, naming the port and the node, with
// nothing it sent shown.
func checkSquatter(t *testing.T, e *env, dir, kc string) {
	t.Helper()
	ctx := context.Background()
	got := make(chan http.Header, 4)
	l, err := net.Listen("tcp", "127.0.0.1:9539")
	if err != nil {
		t.Fatalf("the squatter's port: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"findings":[{"rule":"forged-by-the-squatter","severity":"critical","subject":{"kind":"node"}}],"counts":{}}`)
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	out, stderr, err := e.plugin(t, dir, kc, "audit", "-A", "--agent-port", "9539")
	t.Logf("the plugin against the squatter: %v\n%s", err, stderr)
	if err == nil || !strings.Contains(stderr, "is not the agent's") || !strings.Contains(stderr, "127.0.0.1:9539 of node "+e.node) || strings.Contains(out, "forged") {
		t.Errorf("the squatter's answer: %v: stdout %q stderr %q; want it refused, naming 127.0.0.1:9539 of node %s", err, out, stderr, e.node)
	}
	var h http.Header
	select {
	case h = <-got:
	default:
		t.Fatal("the squatter received no request")
	}
	scheme, token, _ := strings.Cut(h.Get("Authorization"), " ")
	cfg, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		if ai.Token != "" && strings.Contains(h.Get("Authorization")+h.Get("Cookie"), ai.Token) {
			t.Errorf("the squatter received the user's own token")
		}
	}
	if scheme != "Bearer" || token == "" {
		t.Fatalf("the squatter received Authorization %q, want the reader's bearer token", h.Get("Authorization"))
	}
	review := func(aud ...string) authnv1.TokenReviewStatus {
		r, err := e.cs.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: aud}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	if st := review(); st.Authenticated {
		t.Errorf("the token the squatter received is accepted by the API server (as %s)", st.User.Username)
	}
	st := review("cgwarden.io/agent-reader")
	if !st.Authenticated || st.User.Username != "system:serviceaccount:cgwarden-system:cgwarden-reader" || fmt.Sprint(st.User.Extra["authentication.kubernetes.io/node-name"]) != "["+e.node+"]" {
		t.Errorf("the token the squatter received: %+v, want cgwarden-reader's for the agent's audience, bound to node %s", st, e.node)
	}
}

// checkAnswerTokenPolicy: the agent's ServiceAccount may mint, through the
// API, only answer tokens (the base's cgwarden-answer-tokens policy): a
// token the API server would accept, or one bound to no pod, is refused;
// an answer token bound to the agent's pod is minted.
func checkAnswerTokenPolicy(t *testing.T, e *env, agent *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate.UserName = "system:serviceaccount:cgwarden-system:cgwarden"
	cfg.Impersonate.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:cgwarden-system", "system:authenticated"}
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pod := &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: agent.Name, UID: agent.UID}
	answer := "cgwarden.io/agent-answer/x"
	for _, c := range []struct {
		name string
		spec authnv1.TokenRequestSpec
		ok   bool
	}{
		{"an API token bound to the pod", authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600), BoundObjectRef: pod}, false},
		{"an unbound answer token", authnv1.TokenRequestSpec{Audiences: []string{answer}, ExpirationSeconds: ptr.To[int64](600)}, false},
		{"a day-long answer token", authnv1.TokenRequestSpec{Audiences: []string{answer}, ExpirationSeconds: ptr.To[int64](86400), BoundObjectRef: pod}, false},
		{"an answer token", authnv1.TokenRequestSpec{Audiences: []string{answer}, ExpirationSeconds: ptr.To[int64](600), BoundObjectRef: pod}, true},
	} {
		var err error
		for i := 0; i < 10; i++ { // the policy reaches admission within a few seconds of its install
			_, err = as.CoreV1().ServiceAccounts("cgwarden-system").CreateToken(ctx, "cgwarden", &authnv1.TokenRequest{Spec: c.spec}, metav1.CreateOptions{})
			if (err == nil) == c.ok {
				break
			}
			time.Sleep(time.Second)
		}
		if (err == nil) != c.ok {
			t.Errorf("the agent mints %s: %v, want allowed=%v", c.name, err, c.ok)
		}
	}
	if _, err := as.CoreV1().ServiceAccounts("cgwarden-system").CreateToken(ctx, "cgwarden-reader", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{"cgwarden.io/agent-reader"}}}, metav1.CreateOptions{}); err == nil {
		t.Error("the agent minted a reader token")
	}
}

// comparePluginWithHost compares the plugin's audit and inventory of ns
// with cgwarden's own, run on the host against the same node.
func comparePluginWithHost(t *testing.T, e *env, dir, kc, bin, ns string) {
	t.Helper()
	podsFile := filepath.Join(t.TempDir(), "pods.json")
	out, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "get", "pods", "-A", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl get pods: %v", err)
	}
	if err := os.WriteFile(podsFile, out, 0o644); err != nil {
		t.Fatal(err)
	}
	host := func(args ...string) []byte {
		cmd := exec.Command(bin, append(args, "-n", ns, "-o", "json", "--pods", podsFile)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); err != nil && !(ok && ee.ExitCode() == 1 && args[0] == "audit") {
			t.Fatalf("cgwarden %s: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
		return b
	}
	report := func(args ...string) json.RawMessage {
		out, stderr, err := e.plugin(t, dir, kc, append(args, "-n", ns, "-o", "json")...)
		if err != nil {
			t.Fatalf("kubectl cgwarden %s: %v: %s", strings.Join(args, " "), err, stderr)
		}
		var d pluginDoc
		if err := json.Unmarshal([]byte(out), &d); err != nil || len(d.Nodes) != 1 {
			t.Fatalf("kubectl cgwarden %s -o json: %v: %.300s", strings.Join(args, " "), err, out)
		}
		return d.Nodes[0].Report
	}
	ours, theirs := auditFindings(t, report("audit")), auditFindings(t, host("audit"))
	t.Logf("findings (plugin): %q", ours)
	if strings.Join(ours, "\n") != strings.Join(theirs, "\n") {
		t.Errorf("kubectl cgwarden audit -n %s findings differ from cgwarden audit on the host:\nplugin: %q\nhost:   %q", ns, ours, theirs)
	}
	if len(ours) == 0 {
		t.Errorf("no finding about %s (two BestEffort pods beside the agent's Burstable pod: besteffort-starvation expected)", ns)
	}
	a, h := inspectPods(t, report("inspect")), inspectPods(t, host("inspect", "--interval", "0"))
	for k, hp := range h {
		ap := a[k]
		if ap.UID != hp.UID || ap.Cgroup != hp.Cgroup || ap.CPU.Weight != hp.CPU.Weight || fmt.Sprint(ap.Containers) != fmt.Sprint(hp.Containers) {
			t.Errorf("pod %s: plugin %+v, host %+v", k, ap, hp)
		}
		// Guaranteed cores follow the siblings' weights (the Burstable
		// tier's is rewritten by the kubelet every minute): same within 5%.
		if d := math.Abs(ap.CPU.GuaranteedCores - hp.CPU.GuaranteedCores); d > 0.05*hp.CPU.GuaranteedCores+1e-4 {
			t.Errorf("pod %s guaranteed cores: plugin %v, host %v", k, ap.CPU.GuaranteedCores, hp.CPU.GuaranteedCores)
		}
		t.Logf("pod %s: weight %d, guaranteed %.4f cores (host %.4f), working set %.0f (host %.0f)", k, ap.CPU.Weight, ap.CPU.GuaranteedCores, hp.CPU.GuaranteedCores, ap.Memory.WorkingSetBytes, hp.Memory.WorkingSetBytes)
	}
	if len(a) != len(h) {
		t.Errorf("plugin shows %d pods of %s, host %d", len(a), ns, len(h))
	}
}

// checkPluginTables: the tables name the node on every row; -A shows the
// agent's own pod (namespace cgwarden-system), -n does not.
func checkPluginTables(t *testing.T, e *env, dir, kc, ns string, agent *corev1.Pod) {
	t.Helper()
	for _, c := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"inspect", "-n", ns}, []string{"busy", "sleeper"}, []string{agent.Name}},
		{[]string{"inspect", "-A"}, []string{"busy", "sleeper", agent.Name}, nil},
		{[]string{"audit", "-n", ns}, []string{"pod " + ns + "/busy"}, []string{agent.Name}},
		{[]string{"inspect", "-A", "--node", e.node}, []string{"busy"}, nil},
	} {
		out, stderr, err := e.plugin(t, dir, kc, c.args...)
		if err != nil {
			t.Errorf("kubectl cgwarden %s: %v: %s", strings.Join(c.args, " "), err, stderr)
			continue
		}
		t.Logf("kubectl cgwarden %s:\n%s", strings.Join(c.args, " "), out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 2 || !strings.HasPrefix(lines[0], "NODE ") {
			t.Errorf("kubectl cgwarden %s: no table: %q", strings.Join(c.args, " "), out)
			continue
		}
		// audit's table ends, after a blank line, with one line per
		// node: what its agent says of it.
		rows, nodeLines, _ := strings.Cut(strings.TrimSpace(out), "\n\n")
		for _, l := range strings.Split(rows, "\n")[1:] {
			if !strings.HasPrefix(l, e.node+" ") {
				t.Errorf("kubectl cgwarden %s: row without the node: %q", strings.Join(c.args, " "), l)
			}
		}
		if c.args[0] == "audit" && !strings.HasPrefix(nodeLines, "node "+e.node+": cgroup ") {
			t.Errorf("kubectl cgwarden %s: no line for node %s after the table: %q", strings.Join(c.args, " "), e.node, nodeLines)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("kubectl cgwarden %s: no %q", strings.Join(c.args, " "), w)
			}
		}
		for _, w := range c.not {
			if strings.Contains(out, w) {
				t.Errorf("kubectl cgwarden %s: shows %q", strings.Join(c.args, " "), w)
			}
		}
	}
	if _, stderr, err := e.plugin(t, dir, kc, "audit", "--node", "no-such-node"); err == nil || !strings.Contains(stderr, "no running cgwarden agent on node no-such-node") {
		t.Errorf("--node no-such-node: %v: %s", err, stderr)
	}
}

// checkPluginNamespace: with -n, the plugin lists the namespace's pods
// and asks only the agents of their nodes. Without list on pods there it
// says so and asks every agent (what the checks above ran with); once
// allowed, -n of the test's namespace asks the lane's node, and -n of a
// namespace with no pods asks no agent at all (no port-forward).
func checkPluginNamespace(t *testing.T, e *env, dir, kc, ns string) {
	t.Helper()
	if _, stderr, err := e.plugin(t, dir, kc, "inspect", "-n", ns); err != nil || !strings.Contains(stderr, "asking every node's agent instead") {
		t.Errorf("-n %s without list on its pods: %v: %s", ns, err, stderr)
	}
	empty := e.namespace(t)
	for _, n := range []string{ns, empty} {
		e.grantIn(t, n, ns, "plugin-user", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}})
	}
	for _, c := range []struct {
		namespace string
		nodes     int
		say       string
	}{
		{ns, 1, fmt.Sprintf("namespace %s has running pods on 1 nodes: asking 1 of 1 agents", ns)},
		{empty, 0, fmt.Sprintf("namespace %s has running pods on 0 nodes: asking 0 of 1 agents", empty)},
	} {
		var out, stderr string
		var err error
		for i := 0; i < 10; i++ { // RBAC reaches the authorizer within a few seconds
			out, stderr, err = e.plugin(t, dir, kc, "audit", "-n", c.namespace, "-o", "json")
			if err == nil && strings.Contains(stderr, c.say) {
				break
			}
			time.Sleep(time.Second)
		}
		t.Logf("kubectl cgwarden audit -n %s: %v\n%s", c.namespace, err, stderr)
		var d pluginDoc
		if err != nil || json.Unmarshal([]byte(out), &d) != nil || len(d.Nodes) != c.nodes || !strings.Contains(stderr, c.say) {
			t.Errorf("kubectl cgwarden audit -n %s: %v: %d nodes, want %d; stderr %q, want %q", c.namespace, err, len(d.Nodes), c.nodes, stderr, c.say)
		}
		if c.nodes == 1 && len(d.Nodes) == 1 && (d.Nodes[0].Name != e.node || d.Nodes[0].Error != "") {
			t.Errorf("kubectl cgwarden audit -n %s: node %q error %q", c.namespace, d.Nodes[0].Name, d.Nodes[0].Error)
		}
	}
}

// grantIn binds a Role with rules in namespace ns to saNS/sa.
func (e *env) grantIn(t *testing.T, ns, saNS, sa string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	name := "cgwarden-test-" + sa
	if _, err := e.cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: saNS}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkPluginRBAC runs the plugin with ServiceAccount tokens: each of
// the shipped roles' rules is needed, and the plugin names what is
// missing.
func checkPluginRBAC(t *testing.T, e *env, dir, ns string) {
	t.Helper()
	nobody, lister, operator, minter, reader := e.saKubeconfig(t, ns, "nobody"), e.saKubeconfig(t, ns, "lister"), e.saKubeconfig(t, ns, "operator"), e.saKubeconfig(t, ns, "minter"), e.saKubeconfig(t, ns, "reader")
	mint := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{"cgwarden-reader"}, Verbs: []string{"create"}}
	e.grant(t, ns, "lister", []rbacv1.PolicyRule{pluginRead, mint})
	e.grant(t, ns, "operator", []rbacv1.PolicyRule{pluginRead, pluginForward})
	e.grant(t, ns, "minter", []rbacv1.PolicyRule{pluginRead, pluginForward, mint})
	e.bindPluginUser(t, ns, "reader")
	for _, c := range []struct {
		who, kubeconfig string
		want            []string // in stderr; nil: success
	}{
		{"a ServiceAccount with no RBAC", nobody, []string{`cannot list resource "pods"`, "get and create on pods/portforward"}},
		{"a ServiceAccount without pods/portforward", lister, []string{`resource "pods/portforward"`, "forbidden", "get and create on pods/portforward"}},
		{"a ServiceAccount that may not mint the reader's token", operator, []string{`resource "serviceaccounts/token"`, "create on serviceaccounts/token of ServiceAccount cgwarden-reader"}},
		{"a ServiceAccount that may not review tokens", minter, []string{"is not the agent's", "create on tokenreviews"}},
		{"a ServiceAccount bound to the shipped roles", reader, nil},
	} {
		var out, stderr string
		var err error
		// RBAC reaches the authorizer within a few seconds.
		for i := 0; i < 10; i++ {
			out, stderr, err = e.plugin(t, dir, c.kubeconfig, "audit", "-A")
			if (err == nil) == (c.want == nil) {
				break
			}
			time.Sleep(time.Second)
		}
		t.Logf("%s: %v\nstdout: %s\nstderr: %s", c.who, err, out, stderr)
		if c.want == nil {
			if err != nil || !strings.Contains(out, e.node+" ") {
				t.Errorf("%s: %v: %s %s", c.who, err, out, stderr)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: the plugin succeeded: %s", c.who, out)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr lacks %q: %s", c.who, w, stderr)
			}
		}
	}
}

// TestKubectlPluginPrometheus: with Prometheus scraping the lane's agent
// as deploy/prometheus/scrape.yaml says (prometheus_test.go's
// startPrometheus), `kubectl cgwarden audit -A --prometheus URL` prints,
// from one query, the lane node's findings counted by rule and severity
// exactly as the port-forward path's findings count them, and `inspect -n
// NS --prometheus URL` the test's pods with the weights the port-forward
// path shows.
func TestKubectlPluginPrometheus(t *testing.T) {
	bin := prometheusBinary(t)
	e := cluster(t)
	ns := e.namespace(t)
	e.runBurstable(t, ns, "reserver", "exec sleep 3600", "500m", "", "")
	e.runPod(t, ns, "sleeper", "exec sleep 3600")
	installAgent(t, e, "testdata/agent-prom")
	prom := e.startPrometheus(t, bin, ns, map[string]standIn{"cgwarden-system": {namespace: "cgwarden-system"}})
	dir := buildPlugin(t)
	kc := e.saKubeconfig(t, ns, "plugin-user")
	e.bindPluginUser(t, ns, "plugin-user")

	var last string
	poll.Until(t, 120*time.Second, "the same findings from Prometheus as through the port-forward", func() (bool, string, error) {
		viaAgent, viaProm := map[string]int{}, map[string]int{}
		out, stderr, err := e.plugin(t, dir, kc, "audit", "-A", "-o", "json")
		var d pluginDoc
		if err != nil || json.Unmarshal([]byte(out), &d) != nil || len(d.Nodes) != 1 {
			return false, fmt.Sprintf("port-forward: %v: %s", err, stderr), nil
		}
		var r struct {
			Findings []struct{ Rule, Severity string }
		}
		if err := json.Unmarshal(d.Nodes[0].Report, &r); err != nil {
			return false, "", err
		}
		for _, f := range r.Findings {
			viaAgent[f.Rule+" "+f.Severity]++
		}
		out, stderr, err = e.plugin(t, dir, kc, "audit", "-A", "--prometheus", prom.base, "-o", "json")
		var p struct {
			Nodes []struct {
				Name     string
				Error    string
				Findings []struct {
					Rule, Severity string
					Count          int
				}
			}
		}
		if err != nil || json.Unmarshal([]byte(out), &p) != nil || len(p.Nodes) != 1 || p.Nodes[0].Name != e.node {
			return false, fmt.Sprintf("--prometheus: %v: %s %s", err, out, stderr), nil
		}
		for _, f := range p.Nodes[0].Findings {
			viaProm[f.Rule+" "+f.Severity] += f.Count
		}
		last = stderr
		return len(viaAgent) > 0 && fmt.Sprint(viaAgent) == fmt.Sprint(viaProm), fmt.Sprintf("port-forward %v, Prometheus %v", viaAgent, viaProm), nil
	})
	t.Logf("kubectl cgwarden audit -A --prometheus: %s", last)

	table, stderr, err := e.plugin(t, dir, kc, "inspect", "-n", ns, "--prometheus", prom.base)
	t.Logf("kubectl cgwarden inspect -n %s --prometheus:\n%s%s", ns, table, stderr)
	if err != nil {
		t.Fatalf("inspect --prometheus: %v", err)
	}
	pf, stderr, err := e.plugin(t, dir, kc, "inspect", "-n", ns, "-o", "json")
	var d pluginDoc
	if err != nil || json.Unmarshal([]byte(pf), &d) != nil || len(d.Nodes) != 1 {
		t.Fatalf("inspect through the port-forward: %v: %s", err, stderr)
	}
	for key, p := range inspectPods(t, d.Nodes[0].Report) {
		name := strings.TrimPrefix(key, ns+"/")
		row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(e.node) + `\s+` + regexp.QuoteMeta(ns) + `\s+` + regexp.QuoteMeta(name) + `\s+(\d+)\s`).FindStringSubmatch(table)
		if row == nil || row[1] != fmt.Sprint(p.CPU.Weight) {
			t.Errorf("pod %s: weight %d through the port-forward, row %q from Prometheus", key, p.CPU.Weight, row)
		}
	}
}
