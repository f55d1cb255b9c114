package sizer

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

func maxSizes(t *testing.T, s string) vmsize.MaxSizes {
	t.Helper()
	m, err := vmsize.ParseMaxSizes(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// At admission a request above the bound of the pod's namespace
// (--max-size) is set at the bound, with a warning saying so, for a VM's
// size and an annotation's alike; a pod of a namespace the flag does not
// bound gets its whole size, and "*" bounds the namespaces not named.
func TestReviewHoldsRequestsToTheNamespaceBound(t *testing.T) {
	vms := fakeVMs{}
	for _, ns := range []string{"tenant", "other"} {
		v := vm(8.0)
		v.SetNamespace(ns)
		_ = unstructured.SetNestedField(v.Object, 16.0, "spec", "guest", "cpus", "max")
		vms[ns+"/vm1"] = v
	}
	annotated := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sandbox", Annotations: map[string]string{vmsize.AnnotationCPU: "6"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
	}
	for _, tc := range []struct {
		name, flag, ns string
		pod            *corev1.Pod
		want           string // requests.cpu set
		warning        string // "" none
	}{
		{name: "VM above its namespace's bound", flag: "tenant=2", ns: "tenant", pod: runnerPod(), want: "2",
			warning: "cgwarden sizer: VM size 8 cut to namespace tenant's --max-size bound tenant=2"},
		{name: "annotation above its namespace's bound", flag: "tenant=2500m", ns: "tenant", pod: annotated(), want: "2500m",
			warning: "cgwarden sizer: annotation cgwarden.io/cpu 6 cut to namespace tenant's --max-size bound tenant=2500m"},
		{name: "another namespace: its whole size", flag: "tenant=2", ns: "other", pod: runnerPod(), want: "8"},
		{name: "another namespace: the * bound", flag: "tenant=2,*=4", ns: "other", pod: runnerPod(), want: "4",
			warning: "VM size 8 cut to namespace other's --max-size bound *=4"},
		{name: "within the bound", flag: "tenant=16", ns: "tenant", pod: runnerPod(), want: "8"},
		{name: "no --max-size", ns: "tenant", pod: runnerPod(), want: "8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &Webhook{VMs: vms, Log: slog.New(slog.DiscardHandler), MaxSizes: maxSizes(t, tc.flag)}
			tc.pod.Namespace = tc.ns
			r := h.Review(context.Background(), &admissionv1.AdmissionRequest{
				UID: "r1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: tc.ns,
				Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: mustJSON(t, tc.pod)},
			})
			if !r.Allowed || r.Patch == nil {
				t.Fatalf("not sized: %+v", r)
			}
			got := applyPatch(t, mustJSON(t, tc.pod), r.Patch).Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
			if got.String() != tc.want {
				t.Errorf("requests.cpu %s, want %s", got.String(), tc.want)
			}
			switch {
			case tc.warning == "" && len(r.Warnings) != 0:
				t.Errorf("warnings %q, want none", r.Warnings)
			case tc.warning != "" && (len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], tc.warning)):
				t.Errorf("warnings %q, want one saying %q", r.Warnings, tc.warning)
			}
		})
	}
}

// The resize path holds a running runner pod's request to the bound of
// its namespace as to its node's allocatable CPU, the lower of the two:
// a VM of use 8 on a node of 4 allocatable CPUs is resized to 2 in
// namespace tenant (--max-size tenant=2), with the reason in its Event,
// and to 4 in a namespace the flag does not bound.
func TestControllerHoldsResizesToTheNamespaceBound(t *testing.T) {
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}}); err != nil {
		t.Fatal(err)
	}
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{podsByVM: podVMKey})
	vms := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	var objs []runtime.Object
	for _, ns := range []string{"tenant", "other"} {
		p := runningRunner("1", "")
		p.Namespace, p.UID, p.Spec.NodeName = ns, types.UID("uid-"+ns), "n1"
		v := vm(8.0)
		v.SetNamespace(ns)
		_ = unstructured.SetNestedField(v.Object, 16.0, "spec", "guest", "cpus", "max")
		_ = unstructured.SetNestedField(v.Object, p.Name, "status", "podName")
		if err := pods.Add(p); err != nil {
			t.Fatal(err)
		}
		if err := vms.Add(v); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, p)
	}
	cs := fake.NewClientset(objs...)
	patched := map[string]string{}
	cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		patched[pa.GetNamespace()] = string(pa.GetPatch())
		return true, &corev1.Pod{}, nil
	})
	events := record.NewFakeRecorder(10)
	c := &Controller{Client: cs, Events: events, Log: slog.New(slog.DiscardHandler), MaxSizes: maxSizes(t, "tenant=2"),
		EventWindow: time.Minute, now: time.Now, reported: map[types.UID]string{},
		vms: cache.NewGenericLister(vms, VirtualMachines.GroupResource()), pods: pods, nodes: corelisters.NewNodeLister(nodes)}
	c.evs = eventLimit{Window: c.EventWindow}
	for _, key := range []string{"tenant/vm1", "other/vm1"} {
		if err := c.sync(context.Background(), key, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{
		"tenant": string(resizePatch(ResizeDecision{Container: "neonvm-runner", To: 2000})),
		"other":  string(resizePatch(ResizeDecision{Container: "neonvm-runner", To: 4000})),
	}
	for ns, w := range want {
		if patched[ns] != w {
			t.Errorf("namespace %s: patch %s, want %s", ns, patched[ns], w)
		}
	}
	var said []string
	for len(events.Events) > 0 {
		said = append(said, <-events.Events)
	}
	wantEvents := []string{
		"CPU request 1 → 2 on container neonvm-runner (VM size 8): VM size 8 cut to namespace tenant's --max-size bound tenant=2",
		"CPU request 1 → 4 on container neonvm-runner (VM size 8): VM size 8 cut to the node's allocatable 4",
	}
	if len(said) != len(wantEvents) {
		t.Fatalf("Events %q, want %q", said, wantEvents)
	}
	for i, w := range wantEvents {
		if !strings.Contains(said[i], w) {
			t.Errorf("Event %q, want %q", said[i], w)
		}
	}
}
