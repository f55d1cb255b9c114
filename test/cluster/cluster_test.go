package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/cgwarden/cgwarden/internal/poll"
)

const (
	busybox     = "cgwarden.local/busybox:1"
	wantVersion = "v1.37.2"
	// wantContainerd is the runtime scripts/cluster builds
	// (CONTAINERD_VERSION, test/cluster/build/go.mod).
	wantContainerd = "containerd://2.4.2"
)

// env is the cluster as scripts/cluster describes it.
type env struct {
	kubeconfig, kubectl, node string
	cs                        *kubernetes.Clientset
	metrics                   *metricsclient.Clientset
}

// cluster returns the running cluster, or skips the test when there is
// none (fails instead with CGWARDEN_REQUIRE_REAL=1, so that a lane that
// brought nothing up cannot pass).
func cluster(t *testing.T) *env {
	t.Helper()
	e := &env{
		kubeconfig: os.Getenv("CGWARDEN_CLUSTER_KUBECONFIG"),
		kubectl:    os.Getenv("CGWARDEN_CLUSTER_KUBECTL"),
		node:       os.Getenv("CGWARDEN_CLUSTER_NODE"),
	}
	if e.kubeconfig == "" || e.kubectl == "" || e.node == "" {
		msg := "no cluster: run scripts/cluster up and eval \"$(scripts/cluster env)\" (CGWARDEN_CLUSTER_KUBECONFIG, CGWARDEN_CLUSTER_KUBECTL, CGWARDEN_CLUSTER_NODE unset)"
		if os.Getenv("CGWARDEN_REQUIRE_REAL") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if e.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if e.metrics, err = metricsclient.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

// namespace makes a namespace for one test, waits for its default service
// account (pods are refused until the controller-manager has made it), and
// deletes it after the test.
func (e *env) namespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ns := "cgwarden-test-" + rand.String(6)
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	poll.Until(t, 60*time.Second, "service account "+ns+"/default", func() (bool, string, error) {
		_, err := e.cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "not found", nil
		}
		return err == nil, "", err
	})
	return ns
}

// runPod starts a BestEffort busybox pod on the host network running script
// and waits for it to run.
func (e *env) runPod(t *testing.T, ns, name, script string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	zero := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			NodeName:                      "", // the scheduler places it
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           busybox,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", script},
			}},
		},
	}
	pod, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 120*time.Second, "pod "+ns+"/"+name+" running", func() (bool, string, error) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		pod = p
		if p.Status.Phase == corev1.PodFailed {
			return false, "", fmt.Errorf("pod failed: %+v", p.Status)
		}
		return p.Status.Phase == corev1.PodRunning, describe(p), nil
	})
	return pod
}

func describe(p *corev1.Pod) string {
	s := fmt.Sprintf("phase %s node %q", p.Status.Phase, p.Spec.NodeName)
	for _, c := range p.Status.Conditions {
		s += fmt.Sprintf("; %s=%s %s", c.Type, c.Status, c.Message)
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Waiting != nil {
			s += fmt.Sprintf("; %s waiting: %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
		}
		if last := c.LastTerminationState.Terminated; last != nil {
			// Why a restarted container ended (OOMKilled, Error with its
			// exit code: a failed liveness probe's kill is 137/143).
			s += fmt.Sprintf("; %s restarted %d times, last ended %s (exit %d at %s) %s", c.Name, c.RestartCount,
				last.Reason, last.ExitCode, last.FinishedAt.UTC().Format(time.TimeOnly), strings.TrimSpace(last.Message))
		}
	}
	return s
}

// cgroupRoot is where the kubelet's cgroupfs tree for the cpu controller
// lives: the v1 cpu hierarchy, or the v2 root.
func cgroupRoot() (dir, weightFile string) {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return "/sys/fs/cgroup", "cpu.weight"
	}
	return "/sys/fs/cgroup/cpu", "cpu.shares"
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// The node registered through its kubeconfig, runs the version built here,
// is Ready, and the kubelet made its QoS cgroups with the cgroupfs driver.
func TestNodeReady(t *testing.T) {
	e := cluster(t)
	node, err := e.cs.CoreV1().Nodes().Get(context.Background(), e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
			if !ready {
				t.Errorf("node %s Ready=%s: %s %s", e.node, c.Status, c.Reason, c.Message)
			}
		}
	}
	if !ready {
		t.Errorf("node %s is not Ready: %+v", e.node, node.Status.Conditions)
	}
	if v := node.Status.NodeInfo.KubeletVersion; v != wantVersion {
		t.Errorf("kubelet version %q, want %q", v, wantVersion)
	}
	// scripts/cluster builds containerd from test/cluster/build's go.mod;
	// a Debian containerd (1.6) found first on PATH would say so.
	if rt := node.Status.NodeInfo.ContainerRuntimeVersion; rt != wantContainerd {
		t.Errorf("container runtime %q, want %q", rt, wantContainerd)
	}
	// cgroupfs driver: /kubepods/besteffort, and the kubelet holds the
	// BestEffort tier at the minimum weight (v1 cpu.shares 2, v2 cpu.weight 1).
	root, wf := cgroupRoot()
	tier := filepath.Join(root, "kubepods", "besteffort")
	w := readInt(t, filepath.Join(tier, wf))
	if want := map[string]int64{"cpu.shares": 2, "cpu.weight": 1}[wf]; w != want {
		t.Errorf("%s/%s = %d, want %d", tier, wf, w, want)
	}
}

// A pod of the busybox image built here runs under its BestEffort pod
// cgroup, and its logs come back through the API server from the kubelet.
func TestBusyboxPodLogs(t *testing.T) {
	e := cluster(t)
	ns := e.namespace(t)
	marker := "cgwarden-cluster-" + rand.String(8)
	pod := e.runPod(t, ns, "hello", "echo "+marker+"; echo from $(cat /proc/self/cgroup | grep -c kubepods) cgroups; exec sleep 3600")
	if pod.Spec.NodeName != e.node {
		t.Errorf("pod on node %q, want %q", pod.Spec.NodeName, e.node)
	}
	if pod.Status.QOSClass != corev1.PodQOSBestEffort {
		t.Errorf("QoS class %s, want BestEffort", pod.Status.QOSClass)
	}
	ctx := context.Background()
	var logs string
	poll.Until(t, 60*time.Second, "the pod's logs", func() (bool, string, error) {
		b, err := e.cs.CoreV1().Pods(ns).GetLogs("hello", &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		logs = string(b)
		return strings.Contains(logs, marker), logs, nil
	})
	t.Logf("logs: %q", logs)
	if strings.Contains(logs, "from 0 cgroups") {
		t.Errorf("the container's /proc/self/cgroup names no kubepods cgroup: %q", logs)
	}
	root, wf := cgroupRoot()
	podDir := filepath.Join(root, "kubepods", "besteffort", "pod"+string(pod.UID))
	if _, err := os.Stat(filepath.Join(podDir, wf)); err != nil {
		t.Errorf("the pod's cgroup: %v", err)
	}
	// The container's cgroup (named by its containerd ID) holds its process.
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	procs, err := os.ReadFile(filepath.Join(podDir, id, "cgroup.procs"))
	if err != nil {
		t.Errorf("the container's cgroup: %v", err)
	} else if len(bytes.Fields(procs)) == 0 {
		t.Errorf("the container's cgroup %s/%s has no process", podDir, id)
	}
}

// `kubectl top pod` answers through the aggregation layer and
// metrics-server, which scraped the kubelet: a pod that burns CPU shows up
// with its CPU and memory, and so does the node.
func TestKubectlTopPod(t *testing.T) {
	e := cluster(t)
	ns := e.namespace(t)
	// Burn a little CPU: a shell loop in bursts, so the pod's CPU is > 0.
	e.runPod(t, ns, "burner", `while true; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 0.5; done`)
	var out string
	// metrics-server reports a pod after two scrapes (15 s apart) that both
	// saw it: allow for a slow, shared machine.
	poll.Until(t, 180*time.Second, "kubectl top pod", func() (bool, string, error) {
		cmd := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "top", "pod", "-n", ns, "--no-headers")
		b, err := cmd.CombinedOutput()
		out = string(b)
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, out), nil
		}
		return strings.HasPrefix(strings.TrimSpace(out), "burner "), out, nil
	})
	t.Logf("kubectl top pod: %s", strings.TrimSpace(out))
	f := strings.Fields(out)
	if len(f) < 3 || !strings.HasSuffix(f[1], "m") || !strings.HasSuffix(f[2], "Mi") {
		t.Fatalf("kubectl top pod: want `burner <cpu>m <mem>Mi`, got %q", out)
	}
	if f[1] == "0m" {
		t.Errorf("the burner shows 0m CPU: %q", out)
	}
	// The same through client-go: the container and its usage.
	pm, err := e.metrics.MetricsV1beta1().PodMetricses(ns).Get(context.Background(), "burner", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pm.Containers) != 1 || pm.Containers[0].Name != "main" {
		t.Fatalf("pod metrics containers: %+v", pm.Containers)
	}
	if c := pm.Containers[0].Usage.Cpu(); c.IsZero() {
		t.Errorf("container CPU usage is 0: %+v", pm.Containers[0].Usage)
	}
	if m := pm.Containers[0].Usage.Memory(); m.IsZero() {
		t.Errorf("container memory usage is 0: %+v", pm.Containers[0].Usage)
	}
	// And the node.
	b, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "top", "node", "--no-headers").CombinedOutput()
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(b)), e.node+" ") {
		t.Errorf("kubectl top node: %v: %s", err, b)
	}
}

// nodeReaderToken makes ServiceAccount sa in ns, allowed get on the node
// subresources given (nodes/metrics, nodes/stats: what metrics-server and
// Prometheus hold for kubelets) by a ClusterRole and binding removed at
// cleanup, and returns a token of it.
func (e *env) nodeReaderToken(t *testing.T, ns, sa string, resources ...string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := e.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.grantNodes(t, ns, sa, resources...)
	tr, err := e.cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
