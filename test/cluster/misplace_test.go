package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// misplaceClass is the RuntimeClass scripts/cluster makes for the runc
// wrapper of test/cluster/misplace.
const misplaceClass = "misplace"

// literalName is the cgroup the misplace runtime makes for a container of
// a BestEffort pod, at the root of each hierarchy: seed 003's shape.
func literalName(podUID, containerID string) string {
	return literalNameQoS("besteffort", podUID, containerID)
}

// literalNameQoS is literalName for a pod of QoS class qos (lower case).
func literalNameQoS(qos, podUID, containerID string) string {
	return "kubepods-" + qos + "-pod" + strings.ReplaceAll(podUID, "-", "_") + ".slice:cri-containerd:" + containerID
}

// procs lists the PIDs in a cgroup directory (nil when it does not exist).
func procs(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// deployment creates a Deployment of BestEffort busybox pods on the host
// network running script under the misplace runtime.
func (e *env) misplacedDeployment(t *testing.T, ns, name string, replicas int32, script string) {
	t.Helper()
	one := int64(1)
	class := misplaceClass
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork: true, RuntimeClassName: &class, TerminationGracePeriodSeconds: &one,
					Containers: []corev1.Container{{Name: "main", Image: busybox, ImagePullPolicy: corev1.PullNever,
						Command: []string{"sh", "-c", script}}},
				},
			},
		},
	}
	if _, err := e.cs.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// runningPods waits until the app has n pods, every one Running with its
// container started, and returns them by name.
func (e *env) runningPods(t *testing.T, ns, app string, n int, timeout time.Duration) map[string]*corev1.Pod {
	t.Helper()
	out := map[string]*corev1.Pod{}
	poll.Until(t, timeout, fmt.Sprintf("%d pods of %s running", n, app), func() (bool, string, error) {
		pods, err := e.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, "", err
		}
		out = map[string]*corev1.Pod{}
		running, state := 0, ""
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp != nil {
				continue
			}
			out[p.Name] = p
			if containerID(p) != "" {
				running++
			} else if state == "" {
				state = p.Name + ": " + describe(p)
			}
		}
		return running == n && len(out) == n, fmt.Sprintf("%d of %d running (%d pods); %s", running, n, len(out), state), nil
	})
	return out
}

// containerID is the running container's ID, "" until it runs.
func containerID(p *corev1.Pod) string {
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 {
		return ""
	}
	c := p.Status.ContainerStatuses[0]
	if c.State.Running == nil {
		return ""
	}
	return strings.TrimPrefix(c.ContainerID, "containerd://")
}

// kubeletClient asks the kubelet directly (the API server will not proxy
// to a loopback node address) with the admin's client certificate.
func (e *env) kubeletClient(t *testing.T) func(path string) (int, string) {
	t.Helper()
	return e.kubeletAt(t, "127.0.0.1")
}

// kubeletAt asks the kubelet at host's port 10250 (the guest node's
// through QEMU's forward) with the admin's client certificate.
func (e *env) kubeletAt(t *testing.T, host string) func(path string) (int, string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: rt, Timeout: 30 * time.Second}
	return func(path string) (int, string) {
		resp, err := c.Get("https://" + net.JoinHostPort(host, "10250") + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
}

// podCPU is a pod's CPU in a kubelet's Summary API, and its containers'.
type podCPU struct {
	pod, containers float64 // usageNanoCores; -1 when missing
}

// summaryCPU reads /stats/summary's CPU of every pod of ns, by pod name.
func summaryCPU(t *testing.T, get func(string) (int, string), ns string) map[string]podCPU {
	t.Helper()
	out, err := readSummaryCPU(get, ns)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readSummaryCPU is summaryCPU for callers that may not stop the test.
func readSummaryCPU(get func(string) (int, string), ns string) (map[string]podCPU, error) {
	code, body := get("/stats/summary?only_cpu_and_memory=true")
	if code != 200 {
		return nil, fmt.Errorf("/stats/summary: %d %.300s", code, body)
	}
	type cpu struct {
		UsageNanoCores *float64 `json:"usageNanoCores"`
	}
	var sum struct {
		Pods []struct {
			PodRef     struct{ Name, Namespace string } `json:"podRef"`
			CPU        *cpu                             `json:"cpu"`
			Containers []struct {
				CPU *cpu `json:"cpu"`
			} `json:"containers"`
		} `json:"pods"`
	}
	if err := json.Unmarshal([]byte(body), &sum); err != nil {
		return nil, fmt.Errorf("/stats/summary: %v", err)
	}
	out := map[string]podCPU{}
	for _, p := range sum.Pods {
		if p.PodRef.Namespace != ns {
			continue
		}
		v := podCPU{pod: -1, containers: -1}
		if p.CPU != nil && p.CPU.UsageNanoCores != nil {
			v.pod = *p.CPU.UsageNanoCores
		}
		for _, c := range p.Containers {
			if c.CPU != nil && c.CPU.UsageNanoCores != nil {
				v.containers = max(v.containers, 0) + *c.CPU.UsageNanoCores
			}
		}
		out[p.PodRef.Name] = v
	}
	return out, nil
}

// installAgent applies a kustomize overlay of the agent, waits for it to
// be Ready (60 s), and returns its pod's UID, when it became Ready and the
// uninstall (idempotent; also run at cleanup), which waits until the
// agent's namespace is gone.
func (e *env) installAgent(t *testing.T, overlay string) (uid string, ready time.Time, uninstall func()) {
	t.Helper()
	ctx := context.Background()
	if out, err := runKubectl(e, "apply", "-k", overlay); err != nil {
		t.Fatalf("kubectl apply -k %s: %v\n%s", overlay, err, out)
	}
	done := false
	uninstall = func() {
		if done {
			return
		}
		done = true
		if out, err := runKubectl(e, "delete", "-k", overlay, "--wait=true", "--timeout=120s"); err != nil {
			t.Errorf("kubectl delete -k %s: %v\n%s", overlay, err, out)
		}
		poll.Until(t, 120*time.Second, "the agent's namespace gone", func() (bool, string, error) {
			_, err := e.cs.CoreV1().Namespaces().Get(ctx, "cgwarden-system", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, "", nil
			}
			return false, "still there", err
		})
	}
	t.Cleanup(uninstall)
	// Runs before the uninstall: what the agent said, when something failed.
	t.Cleanup(func() {
		if t.Failed() && !done {
			// Every node's agent (ds/cgwarden would pick one).
			pods, err := e.cs.CoreV1().Pods("cgwarden-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cgwarden"})
			if err != nil {
				t.Logf("the agents' logs: listing their pods: %v", err)
				return
			}
			for _, p := range pods.Items {
				logs, _ := runKubectl(e, "logs", "-n", "cgwarden-system", p.Name, "-c", "cgwarden", "--tail", "40")
				t.Logf("the agent's log on node %s (pod %s, last 40 lines):\n%s", p.Spec.NodeName, p.Name, logs)
				for _, c := range p.Status.ContainerStatuses {
					if c.RestartCount == 0 {
						continue
					}
					// A restarted agent: why it ended, in its own words
					// and the kubelet's (a liveness probe's kill is an
					// Event).
					logs, _ := runKubectl(e, "logs", "-n", "cgwarden-system", p.Name, "-c", c.Name, "--previous", "--tail", "40")
					events, _ := runKubectl(e, "get", "events", "-n", "cgwarden-system", "--field-selector", "involvedObject.name="+p.Name)
					t.Logf("%s: the agent before its restart (last 40 lines):\n%s\nthe pod's Events:\n%s", describe(&p), logs, events)
				}
			}
		}
	})
	// One agent per node, each Ready: the host's, and the systemd guest's
	// when it has joined (under TCG its pod takes minutes to start).
	nodes, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wait := 60 * time.Second
	if len(nodes.Items) > 1 {
		wait = 300 * time.Second
	}
	poll.Until(t, wait, "the agent Ready on every node", func() (bool, string, error) {
		pods, err := e.cs.CoreV1().Pods("cgwarden-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cgwarden"})
		if err != nil {
			return false, "", err
		}
		if len(pods.Items) != len(nodes.Items) {
			return false, fmt.Sprintf("%d agent pods, %d nodes", len(pods.Items), len(nodes.Items)), nil
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if !podReady(p) {
				return false, p.Spec.NodeName + ": " + describe(p), nil
			}
			if p.Spec.NodeName == e.node {
				uid = string(p.UID)
			}
		}
		return uid != "", "no agent on " + e.node, nil
	})
	return uid, time.Now(), uninstall
}

// agentInterval is the scan and adoption interval of the agent-adopt
// overlay (testdata/agent-adopt).
const agentInterval = 5 * time.Second

// adoptionSlack is what "within one interval" allows beyond the interval:
// the adoption run's own scan and apply on a loaded 2-core machine, and
// the kubelet's startedAt, which has whole seconds only.
const adoptionSlack = 4 * time.Second

// adopted reports whether the container's processes are in its pod's
// cgroup (the directory cgwarden makes where the kubelet's layout puts
// it) and none is left in the misplaced one.
func adopted(root string, p *corev1.Pod, id string) (bool, string) {
	home := filepath.Join(root, "kubepods", "besteffort", "pod"+string(p.UID), id)
	lit := filepath.Join(root, literalName(string(p.UID), id))
	in, out := procs(home), procs(lit)
	return len(in) > 0 && len(out) == 0, fmt.Sprintf("%s: %d processes in the pod's cgroup, %d in %s", p.Name, len(in), len(out), filepath.Base(lit))
}

// waitAdopted waits until the container is adopted and returns when the
// test saw it so.
func waitAdopted(t *testing.T, root string, p *corev1.Pod, id string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := adopted(root, p, id)
		if ok {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %.12s of %s not adopted after %v: %s", id, p.Name, timeout, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rootEntries lists the top-level cgroups of every hierarchy outside the
// kubelet's tree and the misplace runtime's literal cgroups (what a test
// may change), each with the value of every file cgwarden could write there
// (weights, quotas, limits, subtree_control), the hierarchies' roots
// included: the tree-diff that shows nothing else of the machine's
// changed, neither a cgroup made or removed nor a value written. The
// scratch cgroups of cgwarden's host tests and demo ("cgwarden-test-…",
// "cgwarden-demo-…") are left out too: the machine is shared, and they
// come and go with other engineers' runs.
func rootEntries(t *testing.T) []string {
	t.Helper()
	hs, err := filepath.Glob("/sys/fs/cgroup/*")
	if err != nil {
		t.Fatal(err)
	}
	hs = append(hs, "/sys/fs/cgroup")
	var out []string
	for _, h := range hs {
		_ = filepath.WalkDir(h, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil // gone while walked, or a file
			}
			if p != h && (filepath.Dir(p) == h && (d.Name() == "kubepods" || strings.HasPrefix(d.Name(), "cgwarden-")) || strings.Contains(d.Name(), ":cri-containerd:")) {
				return filepath.SkipDir
			}
			if p != h && slices.Contains(hs, p) {
				return filepath.SkipDir // a v1 hierarchy under the v2 root's directory
			}
			out = append(out, p)
			for _, f := range writable {
				if b, err := os.ReadFile(filepath.Join(p, f)); err == nil {
					out = append(out, filepath.Join(p, f)+"="+strings.TrimSpace(string(b)))
				}
			}
			if p != h {
				// The top level only: below it, the machine's own
				// processes come and go in cgroups of their own (this
				// machine's process_api/<id>).
				return filepath.SkipDir
			}
			return nil
		})
	}
	sort.Strings(out)
	return out
}

// writable are the files of a cgroup that cgwarden writes somewhere
// (rootEntries reads them everywhere else).
var writable = []string{"cpu.shares", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.weight", "cpu.max",
	"memory.limit_in_bytes", "memory.max", "pids.max", "cgroup.subtree_control"}

// literalsOf lists the literal cgroups (in any hierarchy) that name one of
// the pods.
func literalsOf(t *testing.T, uids map[string]bool) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{"/sys/fs/cgroup/*/kubepods-*:cri-containerd:*", "/sys/fs/cgroup/kubepods-*:cri-containerd:*"} {
		m, _ := filepath.Glob(pat)
		for _, p := range m {
			for uid := range uids {
				if strings.Contains(filepath.Base(p), strings.ReplaceAll(uid, "-", "_")) {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
