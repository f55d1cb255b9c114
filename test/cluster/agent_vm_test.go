package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// TestAgentFollowsLiveVMSize: a NeonVM-shaped VirtualMachine (use 2) and
// its runner pod, BestEffort (no sizer here); the agent in fix mode reads
// the VM through its dynamic informer and weighs the pod for 2 CPUs; the
// VM's use moves to 3 (NeonVM's autoscaler does this) and the pod's weight
// follows within 15 s.
func TestAgentFollowsLiveVMSize(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ensureCRD(t, dyn)
	importAgentImage(t)
	ns := e.namespace(t)
	vm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": "db", "namespace": ns},
		"spec":     map[string]any{"guest": map[string]any{"cpus": map[string]any{"min": 1, "max": 4, "use": 2}}},
	}}
	if _, err := dyn.Resource(vmGVR).Namespace(ns).Create(ctx, vm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zero := int64(1)
	p, err := e.cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db-runner", Labels: map[string]string{"vm.neon.tech/name": "db"}},
		Spec: corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: &zero, Containers: []corev1.Container{{
			Name: "neonvm-runner", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
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
	poll(t, 120*time.Second, "the runner pod weighed for use=2", func() (bool, string, error) {
		w := podW()
		return w == 2048, fmt.Sprintf("weight %d", w), nil
	})
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"guest": map[string]any{"cpus": map[string]any{"use": 3}}}})
	from := time.Now()
	if _, err := dyn.Resource(vmGVR).Namespace(ns).Patch(ctx, "db", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 15*time.Second, "the runner pod's weight following use=3", func() (bool, string, error) {
		w := podW()
		return w == 3072, fmt.Sprintf("weight %d", w), nil
	})
	t.Logf("use 2 → 3: the pod's cpu.shares 2048 → 3072 in %v", time.Since(from).Round(10*time.Millisecond))
}

// runKubectl runs the cluster's kubectl with its admin kubeconfig.
func runKubectl(e *env, args ...string) (string, error) {
	out, err := exec.Command(e.kubectl, append([]string{"--kubeconfig", e.kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}
