package cluster

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/certs"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// The second metrics-server's port (the lane's own listens on 4443).
const cgwardenMetricsPort = 4444

// servingCert makes a CA and a serving certificate it signs for the
// agent at the node's address (localhost, 127.0.0.1): PEM of the CA's
// certificate, the serving certificate and its key.
func servingCert(t *testing.T, node string) (ca, cert, key []byte) {
	t.Helper()
	now := time.Now()
	authority, err := certs.NewCA("cgwarden-test-ca", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p, err := authority.Sign(node, []string{node, "localhost", "127.0.0.1"}, now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return authority.PEM, p.Cert, p.Key
}

// agentCertSecret makes the agent's namespace (waiting out one a previous
// test is deleting) and the Secret testdata/agent-tls mounts.
func agentCertSecret(t *testing.T, e *env, cert, key []byte) {
	t.Helper()
	ctx := context.Background()
	poll.Until(t, 120*time.Second, "namespace cgwarden-system made", func() (bool, string, error) {
		_, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cgwarden-system"}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, "a previous one is still going away", nil
		}
		return err == nil, "", err
	})
	if _, err := e.cs.CoreV1().Secrets("cgwarden-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cgwarden-serving-cert"},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": cert, "tls.key": key}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// metricsServerAccount is a ServiceAccount with what metrics-server's own
// manifests give it: read nodes and pods, get nodes/metrics (here: of the
// agent, which checks it with a SubjectAccessReview), delegate
// authentication and authorization, and read the API server's
// authentication configuration. Returns a kubeconfig with its token.
func metricsServerAccount(t *testing.T, e *env, ns string) string {
	t.Helper()
	ctx := context.Background()
	kc := e.saKubeconfig(t, ns, "metrics-server")
	sa := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "metrics-server", Namespace: ns}}
	role := "cgwarden-test-metrics-server-" + ns
	if _, err := e.cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cs.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{}) })
	for name, ref := range map[string]string{role: role, role + "-delegator": "system:auth-delegator"} {
		if _, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: ref}, Subjects: sa}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = e.cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	if _, err := e.cs.RbacV1().RoleBindings("kube-system").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects: sa}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.RbacV1().RoleBindings("kube-system").Delete(context.Background(), role, metav1.DeleteOptions{})
	})
	return kc
}

// startMetricsServer runs a second metrics-server that scrapes the agent
// (port 9530, its certificate verified against caFile; with caFile "",
// not verified: --kubelet-insecure-tls, as for a self-signed kubelet)
// instead of the kubelet, with the ServiceAccount token of kubeconfig
// for everything.
func startMetricsServer(t *testing.T, kubeconfig, caFile string) {
	t.Helper()
	bin := os.Getenv("CGWARDEN_CLUSTER_METRICS_SERVER")
	if bin == "" {
		t.Fatal("CGWARDEN_CLUSTER_METRICS_SERVER is not set (eval \"$(scripts/cluster env)\")")
	}
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(dir, "metrics-server.log"))
	if err != nil {
		t.Fatal(err)
	}
	verify := "--kubelet-certificate-authority=" + caFile
	if caFile == "" {
		verify = "--kubelet-insecure-tls"
	}
	cmd := exec.Command(bin,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", cgwardenMetricsPort), "--cert-dir="+dir,
		"--kubeconfig="+kubeconfig, "--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig,
		"--kubelet-port=9530", "--kubelet-preferred-address-types=Hostname",
		verify, "--metric-resolution=15s",
		// -v=1: why a pod's point is dropped ("Failed getting complete
		// container metric"), in the log the test prints when it fails.
		"-v=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			var keep []string
			for _, l := range strings.Split(string(b), "\n") {
				if !strings.Contains(l, "Scraping metrics") && !strings.Contains(l, "shared_informer") {
					keep = append(keep, l)
				}
			}
			t.Logf("cgwarden-backed metrics-server log:\n%s", tail(strings.Join(keep, "\n"), 80))
		}
	})
}

// directMetrics is a metrics.k8s.io client of the metrics-server on port,
// asked directly (not through the aggregation layer) with the lane's
// admin certificate, which metrics-server accepts by the API server's
// client CA. Its serving certificate is its own self-signed one.
func directMetrics(t *testing.T, e *env, port int) *metricsclient.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Host = fmt.Sprintf("https://127.0.0.1:%d", port)
	cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile, cfg.TLSClientConfig.Insecure = nil, "", true
	mc, err := metricsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mc
}

// runCappedBurner runs a Burstable pod (of runtimeClass, when given) whose
// one container spins under a CPU limit of limit: a steady known rate
// (the CFS quota caps it) unless the node's CPUs are saturated.
func (e *env) runCappedBurner(t *testing.T, ns, name, limit, runtimeClass string) *corev1.Pod {
	t.Helper()
	return e.runBurstable(t, ns, name, "while :; do :; done", "50m", limit, runtimeClass)
}

// runBurstable runs a Burstable pod on the host network: one busybox
// container running script with a CPU request and, when not empty, a CPU
// limit, under runtimeClass when not empty.
func (e *env) runBurstable(t *testing.T, ns, name, script, request, limit, runtimeClass string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	grace := int64(1)
	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(request)}}
	if limit != "" {
		res.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limit)}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
		HostNetwork: true, TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{{Name: "main", Image: busybox, ImagePullPolicy: corev1.PullNever,
			Command: []string{"sh", "-c", script}, Resources: res}},
	}}
	if runtimeClass != "" {
		pod.Spec.RuntimeClassName = &runtimeClass
	}
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 120*time.Second, "pod "+name+" running", func() (bool, string, error) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning, describe(p), nil
	})
	return pod
}

// agentSeries is the agent's container series of namespace ns, read as the
// metrics-server of kubeconfig reads them (its token, the agent's CA), for
// the log.
func agentSeries(t *testing.T, kubeconfig, caFile, ns string) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err.Error()
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Host = "https://localhost:9530"
	cfg.TLSClientConfig = rest.TLSClientConfig{CAFile: caFile}
	rc, err := rest.UnversionedRESTClientFor(withNegotiation(cfg))
	if err != nil {
		return err.Error()
	}
	b, err := rc.Get().AbsPath("/metrics/resource").DoRaw(context.Background())
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `namespace="`+ns+`"`) || strings.Contains(l, `pod="burner"`) || strings.HasPrefix(l, "resource_scrape_error") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func withNegotiation(cfg *rest.Config) *rest.Config {
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return cfg
}

// podCPU is a pod's CPU in millicores from a metrics-server, or -1 when it
// has none yet.
func metricsPodCPU(mc *metricsclient.Clientset, ns, name string) (milli int64, err error) {
	pm, err := mc.MetricsV1beta1().PodMetricses(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return -1, nil
	}
	if err != nil {
		return -1, err
	}
	var sum int64
	for _, c := range pm.Containers {
		sum += c.Usage.Cpu().MilliValue()
	}
	return sum, nil
}

// cpuSample is one pod's CPU from both metrics-servers, asked together.
type cpuSample struct{ kubelet, cgwarden int64 }

// TestMetricsServerReadsAgent: a second metrics-server (the lane's
// v0.8.0 build) pointed at the agent with --kubelet-port=9530, verifying
// the agent's certificate with --kubelet-certificate-authority and
// authenticating with its own ServiceAccount token (so every scrape goes
// through the agent's TokenReview and SubjectAccessReview on
// nodes/metrics), serves the pods' CPU; for a pod spinning under a 200m
// limit its figure is the kubelet-backed metrics-server's within 15%
// (+10m; mean of four paired samples 15 s apart, see checkAgree), and so
// for a pod of the misplace runtime sampled beside it. With the APIService switched to it,
// `kubectl top pod` shows the pod, and the API serves that
// metrics-server's sample (its timestamp); the APIService is switched back
// after.
func TestMetricsServerReadsAgent(t *testing.T) {
	e := cluster(t)
	ca, cert, key := servingCert(t, e.node)
	agentCertSecret(t, e, cert, key)
	installAgent(t, e, "testdata/agent-tls")
	ns := e.namespace(t)
	caFile := filepath.Join(t.TempDir(), "agent-ca.crt")
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	msKubeconfig := metricsServerAccount(t, e, ns)
	startMetricsServer(t, msKubeconfig, caFile)
	// Both pods at once, sampled together: the burner under the normal
	// runtime, and a pod of the misplace runtime (its container's cgroup
	// at the root, as the runwasi shim made it). The cgwarden-backed
	// metrics-server must show the misplaced one with CPU, at the
	// kubelet-backed one's figure: the kubelet's container figures come
	// from containerd's CRI stats, which read the container's own cgroup
	// wherever it is (DESIGN.md), so in this stack only the kubelet's
	// pod-level figures are 0, and metrics-server does not use those.
	e.runCappedBurner(t, ns, "burner", "200m", "")
	misplaced := e.runCappedBurner(t, ns, "misplaced", "200m", "misplace")
	id := strings.TrimPrefix(misplaced.Status.ContainerStatuses[0].ContainerID, "containerd://")
	root, _ := cgroupRoot()
	literal := filepath.Join(root, "kubepods-burstable-pod"+strings.ReplaceAll(string(misplaced.UID), "-", "_")+".slice:cri-containerd:"+id)
	if _, err := os.Stat(literal); err != nil {
		t.Fatalf("the misplace runtime did not misplace the container: %v", err)
	}
	t.Logf("misplaced pod (container cgroup %s)", literal)
	pods := []string{"burner", "misplaced"}
	ours, theirs := directMetrics(t, e, cgwardenMetricsPort), directMetrics(t, e, 4443)
	// metrics-server has a pod's CPU after two scrapes that both saw it.
	poll.Until(t, 120*time.Second, "both pods' CPU from both metrics-servers", func() (bool, string, error) {
		var got []string
		for _, pod := range pods {
			a, errA := metricsPodCPU(ours, ns, pod)
			b, errB := metricsPodCPU(theirs, ns, pod)
			if errA != nil || errB != nil || a <= 0 || b <= 0 {
				return false, fmt.Sprintf("%s: cgwarden-backed %dm (%v), kubelet-backed %dm (%v)", pod, a, errA, b, errB), nil
			}
			got = append(got, fmt.Sprintf("%s %dm/%dm", pod, a, b))
		}
		return true, strings.Join(got, ", "), nil
	})
	// Four paired samples 15 s apart (one scrape each); between them, the
	// agent's /metrics/resource every 3 s must serve the running burner's
	// container in every response (metrics-server drops a pod for a
	// scrape that lacks it, and has no figure for it until two scrapes in
	// a row have it again).
	want := `container_cpu_usage_seconds_total{container="main",namespace="` + ns + `",pod="burner"}`
	samples := map[string][]cpuSample{}
	checks, missing := 0, 0
	for i := 0; i < 4; i++ {
		for _, pod := range pods {
			s := pairedSample(t, ours, theirs, ns, pod)
			samples[pod] = append(samples[pod], s)
			t.Logf("%s sample %d: cgwarden-backed %dm, kubelet-backed %dm", pod, i, s.cgwarden, s.kubelet)
		}
		if i == 3 {
			break
		}
		for j := 0; j < 5; j++ {
			checks++
			if got := agentSeries(t, msKubeconfig, caFile, ns); !strings.Contains(got, want) {
				missing++
				t.Logf("the agent's /metrics/resource lacks the burner (%d of %d); it serves:\n%s", missing, checks, got)
			} else if j == 0 {
				t.Logf("the agent serves:\n%s", got)
			}
			time.Sleep(3 * time.Second)
		}
	}
	if missing > 0 {
		t.Errorf("the agent's /metrics/resource lacked the running burner's container in %d of %d responses 3 s apart", missing, checks)
	}
	for _, pod := range pods {
		checkAgree(t, pod, samples[pod])
	}
	for _, s := range samples["misplaced"] {
		if s.cgwarden == 0 {
			t.Errorf("the cgwarden-backed metrics-server shows the misplaced pod at 0m: %+v", samples["misplaced"])
			break
		}
	}
	switchAPIService(t, e, cgwardenMetricsPort)
	checkTopThroughAgent(t, e, ours, ns)
}

// pairedSample asks both metrics-servers for pod's CPU, one right after
// the other.
func pairedSample(t *testing.T, ours, theirs *metricsclient.Clientset, ns, pod string) cpuSample {
	t.Helper()
	a, err := metricsPodCPU(ours, ns, pod)
	if err != nil {
		t.Fatal(err)
	}
	b, err := metricsPodCPU(theirs, ns, pod)
	if err != nil {
		t.Fatal(err)
	}
	return cpuSample{kubelet: b, cgwarden: a}
}

// checkAgree: every sample has a figure from both, and their means are
// within 15% (+10m for idle-ish pods) of each other. Both read the same
// cgroup counter (the kubelet through containerd's CRI stats) on their own
// 15 s schedules, so their windows are offset by up to 15 s; a pod spinning
// under a quota runs at a steady rate, which the shared machine's load can
// lower, for both alike.
func checkAgree(t *testing.T, pod string, samples []cpuSample) {
	t.Helper()
	var sa, sk float64
	for _, s := range samples {
		if s.cgwarden < 0 || s.kubelet < 0 {
			t.Errorf("%s: a sample without a figure (-1): %+v", pod, samples)
		}
		sa, sk = sa+float64(s.cgwarden), sk+float64(s.kubelet)
	}
	k := float64(len(samples))
	t.Logf("%s CPU (millicores), kubelet-backed vs cgwarden-backed: %+v; means %.0f vs %.0f", pod, samples, sk/k, sa/k)
	if math.Abs(sa-sk)/k > 0.15*sk/k+10 {
		t.Errorf("%s: cgwarden-backed mean %.0fm, kubelet-backed %.0fm: more than 15%% (+10m) apart", pod, sa/k, sk/k)
	}
}

// switchAPIService points the metrics.k8s.io APIService at port (the
// lane's ExternalName Service "localhost") until the test ends.
func switchAPIService(t *testing.T, e *env, port int) {
	t.Helper()
	patch := func(port int) error {
		out, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "patch", "apiservice", "v1beta1.metrics.k8s.io", "--type=json",
			"-p", fmt.Sprintf(`[{"op":"replace","path":"/spec/service/port","value":%d}]`, port)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if err := patch(port); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := patch(4443); err != nil {
			t.Errorf("switching the APIService back: %v", err)
			return
		}
		out, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "wait", "--for=condition=Available", "--timeout=120s", "apiservice/v1beta1.metrics.k8s.io").CombinedOutput()
		if err != nil {
			t.Errorf("the APIService is not Available after switching back: %v: %s", err, out)
		}
	})
}

// checkTopThroughAgent: kubectl top pod shows the burner with CPU, and the
// aggregated API serves the cgwarden-backed metrics-server's sample.
func checkTopThroughAgent(t *testing.T, e *env, ours *metricsclient.Clientset, ns string) {
	t.Helper()
	t.Logf("kubectl top pod (cgwarden-backed): %s", topPod(t, e, ns, "burner"))
	var same bool
	var last string
	for i := 0; i < 10 && !same; i++ {
		agg, err := e.metrics.MetricsV1beta1().PodMetricses(ns).Get(context.Background(), "burner", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		direct, err := ours.MetricsV1beta1().PodMetricses(ns).Get(context.Background(), "burner", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		same = agg.Timestamp.Equal(&direct.Timestamp)
		last = fmt.Sprintf("aggregated sample at %v, cgwarden-backed at %v", agg.Timestamp, direct.Timestamp)
		if !same {
			time.Sleep(time.Second)
		}
	}
	if !same {
		t.Errorf("the metrics API does not serve the cgwarden-backed metrics-server's samples: %s", last)
	}
}

// topPod is `kubectl top pod` of one pod, once it shows CPU above 0m.
func topPod(t *testing.T, e *env, ns, pod string) string {
	t.Helper()
	var out string
	poll.Until(t, 120*time.Second, "kubectl top pod "+pod, func() (bool, string, error) {
		b, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "top", "pod", pod, "-n", ns, "--no-headers").CombinedOutput()
		out = string(b)
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, out), nil
		}
		f := strings.Fields(out)
		return len(f) >= 3 && f[0] == pod && f[1] != "0m", out, nil
	})
	return strings.TrimSpace(out)
}
