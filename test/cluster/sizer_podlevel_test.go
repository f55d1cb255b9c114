package cluster

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// cpuRequest is the CPU request the sizer set on a runner pod and where:
// "pod" (spec.resources, pod-level resources), "container" (its first
// container's), or "" with none.
func cpuRequest(p *corev1.Pod) (resource.Quantity, string) {
	if r := p.Spec.Resources; r != nil {
		if q, ok := r.Requests[corev1.ResourceCPU]; ok {
			return q, "pod"
		}
	}
	if q, ok := p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; ok {
		return q, "container"
	}
	return resource.Quantity{}, ""
}

// The sizer's --pod-level=auto (its default) on the lane's v1.37.2, whose
// API server and kubelet run with their default feature gates
// (PodLevelResources beta since 1.34, InPlacePodLevelResourcesVerticalScaling
// beta since 1.36, both on by default; the kubelet declares the latter in
// its node's status.declaredFeatures): the sizer says it sizes at pod
// level; a runner pod is admitted with spec.resources.requests.cpu=1 and
// no container request, Burstable, its pod cgroup weighing 1 CPU; the
// VM's use going to 1500m reaches that weight through a resize of the
// pod-level request in place.
func TestSizerPodLevelResize(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	dyn := dynamicClient(t, e)
	ensureCRD(t, dyn)
	ns := e.namespace(t)
	_, l := startSizer(t, e, ns)
	if log := l.log(t); !strings.Contains(log, "requests=pod podLevel=auto") {
		t.Fatalf("the sizer did not choose pod-level requests on v1.37.2:\n%s", log)
	}
	for _, line := range strings.Split(l.log(t), "\n") {
		if strings.Contains(line, "requests=pod") {
			t.Logf("sizer: %s", line)
		}
	}
	vms := dyn.Resource(vmGVR).Namespace(ns)
	vm, err := vms.Create(ctx, newVM("vm1", int64(1)), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := e.cs.CoreV1().Pods(ns).Create(ctx, neonRunnerPod("vm1-runner", vm), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	attest(t, vms, "vm1", pod.Name)
	if q, on := cpuRequest(pod); on != "pod" || q.String() != "1" {
		t.Fatalf("admitted with requests.cpu %s on %q, want 1 on the pod; %s", q.String(), on, pod.Annotations["cgwarden.io/sized"])
	}
	if _, ok := pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; ok {
		t.Fatal("a container request beside the pod's")
	}
	t.Logf("admitted: %s", pod.Annotations["cgwarden.io/sized"])
	pod = waitRunning(t, e, ns, pod.Name)
	if pod.Status.QOSClass != corev1.PodQOSBurstable {
		t.Fatalf("QoS %s, want Burstable", pod.Status.QOSClass)
	}
	file, want := podShares(pod.UID, 1000)
	if got := readInt(t, file); got != want {
		t.Fatalf("%s = %d, want %d (1 CPU)", file, got, want)
	}

	cur, err := vms.Get(ctx, "vm1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(cur.Object, "1500m", "spec", "guest", "cpus", "use")
	start := time.Now()
	if _, err := vms.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, want = podShares(pod.UID, 1500)
	var p *corev1.Pod
	poll.Until(t, 15*time.Second, "the pod's weight for 1500m", func() (bool, string, error) {
		got := readInt(t, file)
		if got != want {
			return false, filepath.Base(file) + " " + resource.NewQuantity(got, resource.DecimalSI).String(), nil
		}
		p, err = e.cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil, "", err
	})
	took := time.Since(start)
	if q, on := cpuRequest(p); on != "pod" || q.MilliValue() != 1500 {
		t.Fatalf("requests.cpu %s on %q, want 1500m on the pod; %s", q.String(), on, describe(p))
	}
	if _, ok := p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; ok {
		t.Error("the resize gave the container a request")
	}
	applied := "none"
	if r := p.Status.Resources; r != nil {
		q := r.Requests[corev1.ResourceCPU]
		applied = q.String()
	}
	t.Logf("use 1500m: spec.resources.requests.cpu %s (status.resources %s), %s = %d after %.2fs",
		p.Spec.Resources.Requests.Cpu(), applied, filepath.Base(file), want, took.Seconds())
}
