package sizer

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// TestOneSizePolicy feeds the same VM objects and pods to the agent's
// metadata (a live source's trust) and to the sizer's resize decision, and
// asserts the same answer: which pod a VM's size goes to, the size, and the
// container. The one difference is by design and is checked too: a VM
// that states no spec.guest.cpus.use is weighed by the agent at its max,
// and gets no request from the sizer (a request is a promise to the
// scheduler). With --max-size both hold the size to the bound of the
// pod's namespace, alike.
func TestOneSizePolicy(t *testing.T) {
	vmObj := func(cpus map[string]any, podName string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
			"metadata": map[string]any{"name": "db", "namespace": "team", "uid": "vm-uid"},
			"spec":     map[string]any{"guest": map[string]any{"cpus": cpus}},
		}}
		if podName != "" {
			_ = unstructured.SetNestedField(u.Object, podName, "status", "podName")
		}
		return u
	}
	ctrl := true
	owned := []metav1.OwnerReference{{APIVersion: "vm.neon.tech/v1", Kind: "VirtualMachine", Name: "db", UID: "vm-uid", Controller: &ctrl}}
	pod := func(name string, owners []metav1.OwnerReference, containers ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", UID: types.UID("uid-" + name),
			Labels: map[string]string{vmsize.LabelNeonVM: "db"}, OwnerReferences: owners},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBurstable}}
		for _, c := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}})
		}
		return p
	}
	runner := pod("db-runner", owned, "neonvm-runner", "sidecar")
	forged := pod("a-forged", owned, "sidecar", "neonvm-runner")
	forgedTwo := pod("a-forged-2", owned, "app", "side")
	labelled := pod("a-labelled", nil, "vm")
	tests := []struct {
		name      string
		vm        *unstructured.Unstructured
		pods      []*corev1.Pod
		maxSize   string // --max-size, both given the same
		want      string // the pod sized ("" none)
		size      int64  // its size, when the case checks it
		agentOnly int64  // the agent's size where the sizer makes none
	}{
		{name: "status names the runner", vm: vmObj(map[string]any{"use": 2.0, "max": 4.0}, "db-runner"),
			pods: []*corev1.Pod{forged, forgedTwo, labelled, runner}, want: "db-runner"},
		{name: "use held within max", vm: vmObj(map[string]any{"use": 8.0, "max": 4.0}, "db-runner"),
			pods: []*corev1.Pod{runner}, want: "db-runner"},
		{name: "status names no pod: owner references are claims", vm: vmObj(map[string]any{"use": 2.0}, ""),
			pods: []*corev1.Pod{forged, forgedTwo, labelled, runner}},
		{name: "status names a pod not here", vm: vmObj(map[string]any{"use": 2.0}, "elsewhere"),
			pods: []*corev1.Pod{forged, labelled}},
		{name: "no live size", vm: vmObj(map[string]any{"min": 1.0, "max": 4.0}, "db-runner"),
			pods: []*corev1.Pod{runner}, agentOnly: 4000},
		// --max-size: the namespace's bound, its "*" default, another
		// namespace's bound.
		{name: "above the namespace's bound", vm: vmObj(map[string]any{"use": 8.0, "max": 16.0}, "db-runner"),
			pods: []*corev1.Pod{forged, runner}, maxSize: "team=2", want: "db-runner", size: 2000},
		{name: "above the * bound", vm: vmObj(map[string]any{"use": 8.0, "max": 16.0}, "db-runner"),
			pods: []*corev1.Pod{runner}, maxSize: "other=1,*=2500m", want: "db-runner", size: 2500},
		{name: "another namespace's bound", vm: vmObj(map[string]any{"use": 8.0, "max": 16.0}, "db-runner"),
			pods: []*corev1.Pod{runner}, maxSize: "other=1", want: "db-runner", size: 8000},
		{name: "within the bound", vm: vmObj(map[string]any{"use": 2.0, "max": 16.0}, "db-runner"),
			pods: []*corev1.Pod{runner}, maxSize: "team=4", want: "db-runner", size: 2000},
		{name: "no live size, bounded", vm: vmObj(map[string]any{"min": 1.0, "max": 16.0}, "db-runner"),
			pods: []*corev1.Pod{runner}, maxSize: "team=3", agentOnly: 3000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The agent.
			var meta []metadata.Pod
			for _, p := range tt.pods {
				meta = append(meta, metadata.FromAPI(p))
			}
			bounds, err := vmsize.ParseMaxSizes(tt.maxSize)
			if err != nil {
				t.Fatal(err)
			}
			set := metadata.NewSet(meta)
			set.SetTrust(metadata.Trust{Annotations: metadata.AllNamespaces, MaxSizes: bounds})
			vm, err := vmsize.FromObject(tt.vm.Object, vmsize.Live)
			if err != nil {
				t.Fatal(err)
			}
			set.ApplyVMs([]vmsize.VM{vm})
			agent := map[string]int64{}
			for _, p := range tt.pods {
				if sz, ok, _ := set.DeclaredSize(string(p.UID)); ok {
					agent[p.Name] = sz.MilliCPU
				}
			}
			// The sizer.
			sizer := map[string]string{}
			if r := Runner(vm, tt.pods); r != nil {
				if req, err := vmsize.FromObject(tt.vm.Object, vmsize.Request); err == nil {
					d := DecideResize(r, req.MilliCPU, 0, bounds.For(r.Namespace))
					sizer[r.Name] = fmt.Sprintf("%dm on %s", d.To, d.Container)
				}
			}
			switch {
			case tt.agentOnly != 0:
				if len(sizer) != 0 || len(agent) != 1 || agent["db-runner"] != tt.agentOnly {
					t.Errorf("agent %v, sizer %v: want the agent alone to size db-runner at %dm", agent, sizer, tt.agentOnly)
				}
			case tt.want == "":
				if len(agent) != 0 || len(sizer) != 0 {
					t.Errorf("agent %v, sizer %v: want no pod sized", agent, sizer)
				}
			default:
				want := fmt.Sprintf("%dm on neonvm-runner", agent[tt.want])
				if len(agent) != 1 || len(sizer) != 1 || sizer[tt.want] != want {
					t.Errorf("agent %v, sizer %v: want both to size %s alike (%s)", agent, sizer, tt.want, want)
				}
				if tt.size != 0 && agent[tt.want] != tt.size {
					t.Errorf("agent %v, sizer %v: want both to size %s at %dm", agent, sizer, tt.want, tt.size)
				}
			}
		})
	}
}
