package sizer

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

// The controller against fake clients: it idles without the CRD; with it,
// a burst of VM changes becomes one resize patch to the last size (a
// trailing debounce), on the
// pod's resize subresource, cut to the node's allocatable; a BestEffort
// runner pod gets one CPUNotSized Event.
func TestControllerResizesThroughSubresource(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}}
	sized := runningRunner("1", "")
	sized.Spec.NodeName = "n1"
	be := runningRunner("", "")
	be.Name, be.UID, be.Labels = "vm2-xyz", "u2", map[string]string{"vm.neon.tech/name": "vm2"}
	be.OwnerReferences = nil
	be.Spec.NodeName = "n1"
	cs := fake.NewClientset(node, sized, be)
	var mu sync.Mutex
	var patches []k8stesting.PatchAction
	cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		patches = append(patches, a.(k8stesting.PatchAction))
		mu.Unlock()
		// As the API server would: the pod's request is now 4.
		p := sized.DeepCopy()
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("4")
		return true, p, cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, p.Namespace)
	})
	// Each VM's status names its runner, as NeonVM's controller writes it.
	vm1 := vm(1.0)
	_ = unstructured.SetNestedField(vm1.Object, sized.Name, "status", "podName")
	vm2 := vm(2.0)
	vm2.SetName("vm2")
	_ = unstructured.SetNestedField(vm2.Object, be.Name, "status", "podName")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{VirtualMachines: "VirtualMachineList"}, vm1, vm2)
	events := record.NewFakeRecorder(10)
	var crd atomic.Bool
	c := &Controller{Client: cs, Dynamic: dyn, Events: events, Log: slog.New(slog.DiscardHandler),
		Coalesce: 500 * time.Millisecond, Recheck: 100 * time.Millisecond,
		crdCheck: func() (bool, error) { return crd.Load(), nil }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	time.Sleep(300 * time.Millisecond) // idle: no CRD in discovery
	crd.Store(true)
	time.Sleep(900 * time.Millisecond) // found, informers synced, the initial sync done

	// A burst of ten changes 100 ms apart, longer than the 500 ms window
	// (a leading window would patch an intermediate size in the middle):
	// one patch, to the last size, 6, cut to the node's 4.
	for _, use := range []float64{2, 3, 2.5, 3.5, 1.5, 3, 2, 3.25, 8, 6} {
		u, err := dyn.Resource(VirtualMachines).Namespace("ns").Get(ctx, "vm1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(u.Object, use, "spec", "guest", "cpus", "use")
		if _, err := dyn.Resource(VirtualMachines).Namespace("ns").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(patches) != 1 {
		t.Fatalf("%d patches, want 1 (coalesced)", len(patches))
	}
	p := patches[0]
	if p.GetSubresource() != "resize" || p.GetName() != "vm1-abcde" {
		t.Errorf("patched %s/%s", p.GetName(), p.GetSubresource())
	}
	if want := string(resizePatch("neonvm-runner", 4000)); string(p.GetPatch()) != want {
		t.Errorf("patch %s, want %s", p.GetPatch(), want)
	}
	var got []string
	for len(events.Events) > 0 {
		got = append(got, <-events.Events)
	}
	var notSized, resized int
	for _, e := range got {
		switch {
		case strings.Contains(e, ReasonNotSized):
			notSized++
		case strings.Contains(e, ReasonResized):
			resized++
		}
	}
	if notSized != 1 || resized != 1 {
		t.Errorf("events %q: want one %s and one %s", got, ReasonNotSized, ReasonResized)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
