package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// TestAgentFollowsLiveVMSize: a NeonVM-shaped VirtualMachine (use 2) and
// its runner pod, BestEffort (no sizer here), beside a VirtualMachine no
// pod runs; the agent in fix mode watches the runner's VM (one watch, by
// name) and weighs the pod for 2 CPUs; the VM's use moves to 3 (NeonVM's
// autoscaler does this) and the pod's weight follows within 15 s. The API
// server's own count of watches says the agent watches that one VM and
// not the other, stops when the runner pod goes, and holds no
// cluster-wide VirtualMachine watch.
func TestAgentFollowsLiveVMSize(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	dyn := dynamicClient(t, e)
	ensureCRD(t, dyn)
	importAgentImage(t)
	ns := e.namespace(t)
	var db *unstructured.Unstructured
	for _, name := range []string{"db", "no-pod-here"} {
		vm := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     map[string]any{"guest": map[string]any{"cpus": map[string]any{"min": 1, "max": 4, "use": 2}}},
		}}
		got, err := dyn.Resource(vmGVR).Namespace(ns).Create(ctx, vm, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if name == "db" {
			db = got
		}
	}
	// Owned by its VM and named by its status, as the NeonVM controller
	// makes it: the agent believes a VM's size only for the pod the VM's
	// status names.
	p, err := e.cs.CoreV1().Pods(ns).Create(ctx, neonRunnerPod("db-runner", db), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	attest(t, dyn.Resource(vmGVR).Namespace(ns), "db", p.Name)
	kubectl := func(args ...string) (string, error) {
		out, err := runKubectl(e, args...)
		return out, err
	}
	if out, err := kubectl("apply", "-k", "testdata/agent-fix"); err != nil {
		t.Fatalf("kubectl apply -k: %v\n%s", err, out)
	}
	t.Cleanup(func() { kubectl("delete", "-k", "testdata/agent-fix", "--wait=true", "--timeout=120s") })
	root, wf := cgroupRoot()
	podW := func() int64 { return readInt(t, filepath.Join(root, "kubepods/besteffort/pod"+string(p.UID), wf)) }
	poll.Until(t, 120*time.Second, "the runner pod weighed for use=2", func() (bool, string, error) {
		w := podW()
		return w == 2048, fmt.Sprintf("weight %d", w), nil
	})
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"guest": map[string]any{"cpus": map[string]any{"use": 3}}}})
	from := time.Now()
	if _, err := dyn.Resource(vmGVR).Namespace(ns).Patch(ctx, "db", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 15*time.Second, "the runner pod's weight following use=3", func() (bool, string, error) {
		w := podW()
		return w == 3072, fmt.Sprintf("weight %d", w), nil
	})
	t.Logf("use 2 → 3: the pod's cpu.shares 2048 → 3072 in %v", time.Since(from).Round(10*time.Millisecond))

	// The API server's count: one watch of one named VirtualMachine (scope
	// "resource": a watch with a metadata.name field selector) — db's, not
	// no-pod-here's. No other client of this lane watches VirtualMachines
	// by name (the controller manager's garbage collector watches them
	// cluster-wide).
	withAgent := vmWatches(t, e)
	if withAgent["resource"] != 1 {
		t.Errorf("VirtualMachine watches by name: %d, want 1 (the runner's VM only); by scope %v", withAgent["resource"], withAgent)
	}
	// The runner pod goes: its VM's watch stops.
	if err := e.cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 60*time.Second, "no VirtualMachine watched by name once the runner pod is gone", func() (bool, string, error) {
		w := vmWatches(t, e)
		return w["resource"] == 0, fmt.Sprintf("by scope %v", w), nil
	})
	// Without the agent there are as many cluster-wide VirtualMachine
	// watches as with it: it held none. (The garbage collector may open
	// its own meanwhile, never close it.)
	if out, err := kubectl("delete", "-k", "testdata/agent-fix", "--wait=true", "--timeout=120s"); err != nil {
		t.Fatalf("kubectl delete -k: %v\n%s", err, out)
	}
	poll.Until(t, 120*time.Second, "the agent's pod gone", func() (bool, string, error) {
		pods, err := e.cs.CoreV1().Pods("cgwarden-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cgwarden"})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d agent pods", len(pods.Items)), nil
	})
	if without := vmWatches(t, e); without["cluster"] < withAgent["cluster"] {
		t.Errorf("cluster-wide VirtualMachine watches: %d with the agent, %d without: the agent held one", withAgent["cluster"], without["cluster"])
	} else {
		t.Logf("VirtualMachine watches with the agent %v, without %v", withAgent, without)
	}
}

// vmWatches reads from the API server's /metrics the VirtualMachine
// watches it serves now (apiserver_longrunning_requests), by scope:
// "resource" for a watch of one object by name, "namespace", "cluster".
func vmWatches(t *testing.T, e *env) map[string]int {
	t.Helper()
	out, err := runKubectl(e, "get", "--raw", "/metrics")
	if err != nil {
		t.Fatalf("API server /metrics: %v", err)
	}
	w := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `group="vm.neon.tech"`) ||
			!strings.Contains(line, `resource="virtualmachines"`) || !strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		m := scopeRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("no scope or value in %q", line)
		}
		n, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		w[m[1]] += int(n)
	}
	return w
}

var scopeRE = regexp.MustCompile(`scope="([a-z]*)".*\}\s+([0-9.e+]+)$`)

// runKubectl runs the cluster's kubectl with its admin kubeconfig.
func runKubectl(e *env, args ...string) (string, error) {
	out, err := exec.Command(e.kubectl, append([]string{"--kubeconfig", e.kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// TestAgentReadsVMsOfNamedNamespacesOnly: the fixing agent installed with
// deploy/kustomize/components/vm-namespaces, which grants it the VM
// objects of namespace vms alone. A VM (use 2) and the runner pod its
// status names, in vms and in another namespace: the real API server lets
// the agent's ServiceAccount read the first and refuses the second
// (kubectl auth can-i); the runner in vms is weighed for 2 CPUs, the other
// keeps the kubelet's weight, and the agent says why — its log names the
// refused VM, and cgwarden_agent_vm_reads_refused is 1.
func TestAgentReadsVMsOfNamedNamespacesOnly(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	dyn := dynamicClient(t, e)
	ensureCRD(t, dyn)
	importAgentImage(t)
	const granted = "vms" // the component's namespace
	switch _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: granted}}, metav1.CreateOptions{}); {
	case err == nil: // ours: removed after
		t.Cleanup(func() { _ = e.cs.CoreV1().Namespaces().Delete(context.Background(), granted, metav1.DeleteOptions{}) })
	case !apierrors.IsAlreadyExists(err):
		t.Fatal(err)
	}
	other := e.namespace(t)
	pods := map[string]*corev1.Pod{}
	for _, ns := range []string{granted, other} {
		got, err := dyn.Resource(vmGVR).Namespace(ns).Create(ctx, newVM("db", int64(2)), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.cs.CoreV1().Pods(ns).Create(ctx, neonRunnerPod("db-runner", got), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		attest(t, dyn.Resource(vmGVR).Namespace(ns), "db", p.Name)
		pods[ns] = p
	}
	e.installAgent(t, "testdata/agent-fix-vm-namespaces")
	const agentSA = "system:serviceaccount:cgwarden-system:cgwarden"
	for ns, want := range map[string]string{granted: "yes", other: "no"} {
		out, _ := runKubectl(e, "auth", "can-i", "list", "virtualmachines.vm.neon.tech", "-n", ns, "--as", agentSA)
		if got := strings.TrimSpace(out); got != want {
			t.Errorf("kubectl auth can-i list virtualmachines -n %s --as %s: %q, want %s", ns, agentSA, got, want)
		}
	}
	root, wf := cgroupRoot()
	weight := func(ns string) int64 {
		return readInt(t, filepath.Join(root, "kubepods/besteffort/pod"+string(pods[ns].UID), wf))
	}
	poll.Until(t, 120*time.Second, "the runner in "+granted+" weighed for use=2", func() (bool, string, error) {
		w := weight(granted)
		return w == 2048, fmt.Sprintf("weight %d", w), nil
	})
	get := e.agentReader(t, other)
	refused := regexp.MustCompile(`(?m)^cgwarden_agent_vm_reads_refused (\d+)$`)
	poll.Until(t, 60*time.Second, "cgwarden_agent_vm_reads_refused 1 on the agent's /metrics", func() (bool, string, error) {
		code, body := get("/metrics")
		m := refused.FindStringSubmatch(body)
		return code == 200 && m != nil && m[1] == "1", strings.Join(m, " "), nil
	})
	if w := weight(other); w == 2048 {
		t.Errorf("the runner in %s weighs %d: sized from a VM the agent may not read", other, w)
	} else {
		t.Logf("runner in %s: %d (VM read); in %s: %d (VM refused)", granted, weight(granted), other, w)
	}
	logs, _ := runKubectl(e, "logs", "-n", "cgwarden-system", "ds/cgwarden", "-c", "cgwarden")
	if !strings.Contains(logs, "refuses this agent the VM object") || !strings.Contains(logs, other+"/db") {
		t.Errorf("the agent's log does not name the refused VM %s/db:\n%s", other, tail(logs, 20))
	}
}
