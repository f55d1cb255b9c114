package sizer

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// fullRunnerPod reads testdata/runner-pod.json: a NeonVM runner pod as the
// API server serves it, managedFields and all — the runner of
// internal/podsource/testdata/pods-full.json (owned by its VirtualMachine,
// an init container, the -vmspec argument, privileged, volumes, the
// kubelet's status) after the sizer sized it to 2 CPUs, with a resize to 3
// in progress and deferred (PodResizePending Deferred, PodResizeInProgress)
// and the resources the kubelet reports in its container status.
func fullRunnerPod(t *testing.T) *corev1.Pod {
	t.Helper()
	raw, err := os.ReadFile("testdata/runner-pod.json")
	if err != nil {
		t.Fatal(err)
	}
	var p corev1.Pod
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// fullVM reads testdata/virtualmachine.json: that pod's VirtualMachine as
// the API server serves it, with the fields NeonVM's controller and
// autoscaler write (neondatabase/autoscaling, neonvm/apis/neonvm/v1; the
// shape of test/scale's vmObject) and their managedFields.
func fullVM(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile("testdata/virtualmachine.json")
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		t.Fatal(err)
	}
	return u
}

// runnerVariants are the fixture pod in each state DecideResize tells
// apart.
func runnerVariants(t *testing.T) map[string]*corev1.Pod {
	t.Helper()
	out := map[string]*corev1.Pod{}
	variant := func(name string, f func(p *corev1.Pod)) {
		p := fullRunnerPod(t)
		f(p)
		out[name] = p
	}
	variant("sized, resize deferred", func(*corev1.Pod) {})
	variant("resized", func(p *corev1.Pod) { p.Status.Conditions = p.Status.Conditions[2:] })
	variant("best effort", func(p *corev1.Pod) {
		delete(p.Spec.Containers[0].Resources.Requests, corev1.ResourceCPU)
		p.Status.QOSClass = corev1.PodQOSBestEffort
	})
	variant("pod-level request only", func(p *corev1.Pod) {
		delete(p.Spec.Containers[0].Resources.Requests, corev1.ResourceCPU)
		p.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
	})
	variant("CPU limit", func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("2500m")
	})
	variant("being deleted", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} })
	variant("not running", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending })
	variant("annotation names a missing container", func(p *corev1.Pod) {
		p.Annotations[vmsize.AnnotationContainer] = "qemu"
	})
	variant("two containers, no annotation", func(p *corev1.Pod) {
		delete(p.Annotations, vmsize.AnnotationContainer)
		p.Spec.Containers[0].Name = "runner"
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "logs", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}}})
	})
	variant("two containers, annotated", func(p *corev1.Pod) {
		p.Spec.Containers = append([]corev1.Container{{Name: "logs", Image: "busybox"}}, p.Spec.Containers...)
	})
	return out
}

func slimPod(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	o, err := slimRunnerPod(p.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return o.(*corev1.Pod)
}

// The slim runner pod gives DecideResize the same answer as the whole one,
// in every state it tells apart and for every VM size and node cap; the
// controller's selector still finds it; what the sizer does not read is
// gone; slimming is idempotent; a tombstone passes through.
func TestSlimRunnerPodDecidesAlike(t *testing.T) {
	for name, full := range runnerVariants(t) {
		slim := slimPod(t, full)
		for _, vmMilli := range []int64{1000, 2000, 2500, 3000, 4000} {
			for _, alloc := range []int64{0, 1500, 64000} {
				a, b := DecideResize(full, vmMilli, alloc, vmsize.Bound{}), DecideResize(slim, vmMilli, alloc, vmsize.Bound{})
				if a != b {
					t.Errorf("%s, VM %dm, node %dm: whole pod %+v, slim %+v", name, vmMilli, alloc, a, b)
				}
			}
		}
		if hasCPURequest(full) != hasCPURequest(slim) {
			t.Errorf("%s: hasCPURequest differs", name)
		}
		if again := slimPod(t, slim); !reflect.DeepEqual(again, slim) {
			t.Errorf("%s: slimming a slim pod changed it", name)
		}
	}

	full := fullRunnerPod(t)
	slim := slimPod(t, full)
	sel := labels.SelectorFromSet(labels.Set{"vm.neon.tech/name": "compute-quiet-mode-a1b2c3"})
	if !sel.Matches(labels.Set(slim.Labels)) {
		t.Errorf("the controller's selector %s does not match the slim pod's labels %v", sel, slim.Labels)
	}
	if slim.Name != full.Name || slim.Namespace != full.Namespace || slim.UID != full.UID || slim.ResourceVersion != full.ResourceVersion ||
		slim.Spec.NodeName != full.Spec.NodeName {
		t.Errorf("identity or node lost: %+v", slim.ObjectMeta)
	}
	if want := map[string]string{vmsize.AnnotationContainer: "neonvm-runner"}; !reflect.DeepEqual(slim.Annotations, want) {
		t.Errorf("annotations %v, want only the one the controller reads %v", slim.Annotations, want)
	}
	var conds []corev1.PodConditionType
	for _, c := range slim.Status.Conditions {
		conds = append(conds, c.Type)
	}
	if want := []corev1.PodConditionType{corev1.PodResizePending}; !reflect.DeepEqual(conds, want) {
		t.Errorf("conditions %v, want %v", conds, want)
	}
	c := slim.Spec.Containers[0]
	for what, gone := range map[string]bool{
		"managedFields":            slim.ManagedFields == nil,
		"other labels":             len(slim.Labels) == 1,
		"owner references":         slim.OwnerReferences == nil,
		"init containers":          slim.Spec.InitContainers == nil,
		"volumes":                  slim.Spec.Volumes == nil,
		"tolerations and affinity": slim.Spec.Tolerations == nil && slim.Spec.Affinity == nil,
		"container command, args, env, ports, image": c.Command == nil && c.Args == nil && c.Env == nil && c.Ports == nil && c.Image == "",
		"container security context and mounts":      c.SecurityContext == nil && c.VolumeMounts == nil && c.ResizePolicy == nil,
		"pod IPs and start time":                     slim.Status.PodIP == "" && slim.Status.PodIPs == nil && slim.Status.StartTime == nil,
		"container statuses":                         slim.Status.ContainerStatuses == nil && slim.Status.InitContainerStatuses == nil,
	} {
		if !gone {
			t.Errorf("%s kept", what)
		}
	}
	fb, _ := json.Marshal(full)
	sb, _ := json.Marshal(slim)
	if len(sb)*4 > len(fb) {
		t.Errorf("slim pod %d bytes of JSON against %d whole: want at most a quarter", len(sb), len(fb))
	}
	t.Logf("runner pod JSON: %d bytes whole, %d slim", len(fb), len(sb))

	tomb := cache.DeletedFinalStateUnknown{Key: "default/" + slim.Name, Obj: slim}
	if o, err := slimRunnerPod(tomb); err != nil || !reflect.DeepEqual(o, tomb) {
		t.Errorf("tombstone: %v, %v; want it unchanged", o, err)
	}
}

// The slim VirtualMachine gives vmsize.FromObject, in both modes (the
// sizer's Request among them), the same answer as the whole one, whatever
// spec.guest.cpus.use holds (a quantity string, a number, an integer,
// nothing, something invalid), and keeps only what the sizer reads;
// slimming is idempotent; a tombstone passes through.
func TestSlimVMSizesAlike(t *testing.T) {
	for _, use := range []any{"2", "1500m", 1.5, int64(3), nil, "-1", "lots", map[string]any{"x": int64(1)}} {
		full := fullVM(t)
		if use == nil {
			unstructured.RemoveNestedField(full.Object, "spec", "guest", "cpus", "use")
		} else if err := unstructured.SetNestedField(full.Object, use, "spec", "guest", "cpus", "use"); err != nil {
			t.Fatal(err)
		}
		o, err := vmsize.Slim(full.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		slim := o.(*unstructured.Unstructured)
		for _, mode := range []vmsize.Mode{vmsize.Live, vmsize.Request} {
			a, errA := vmsize.FromObject(full.Object, mode)
			b, errB := vmsize.FromObject(slim.Object, mode)
			if !a.Equal(b) || (errA == nil) != (errB == nil) || (errA != nil && errA.Error() != errB.Error()) {
				t.Errorf("use %v, vmsize mode %d: whole VM %+v, %v; slim %+v, %v", use, mode, a, errA, b, errB)
			}
		}
		if again, _ := vmsize.Slim(slim.DeepCopy()); !reflect.DeepEqual(again, slim) {
			t.Errorf("use %v: slimming a slim VM changed it", use)
		}
	}

	full := fullVM(t)
	o, _ := vmsize.Slim(full.DeepCopy())
	slim := o.(*unstructured.Unstructured)
	want := map[string]any{
		"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": "compute-quiet-mode-a1b2c3", "namespace": "default",
			"uid": "6c1f9a2e-3b4d-4e5f-8a7b-9c0d1e2f3a4b", "resourceVersion": "48219870"},
		"spec":   map[string]any{"guest": map[string]any{"cpus": map[string]any{"min": "1", "max": "4", "use": "2"}}},
		"status": map[string]any{"podName": "compute-quiet-mode-a1b2c3-xk7dq"},
	}
	if !reflect.DeepEqual(slim.Object, want) {
		got, _ := json.Marshal(slim.Object)
		t.Errorf("slim VM %s", got)
	}
	key, err := cache.MetaNamespaceKeyFunc(slim)
	if err != nil || key != "default/compute-quiet-mode-a1b2c3" {
		t.Errorf("key %q, %v", key, err)
	}
	fb, _ := full.MarshalJSON()
	sb, _ := slim.MarshalJSON()
	t.Logf("VirtualMachine JSON: %d bytes whole, %d slim", len(fb), len(sb))

	// A VM as it may be seen before NeonVM wrote its status, or without
	// a guest: what is there is kept, nothing made up.
	bare := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": "v", "namespace": "ns"}, "spec": map[string]any{"guest": "odd"}}}
	o, _ = vmsize.Slim(bare)
	if got := o.(*unstructured.Unstructured).Object; !reflect.DeepEqual(got, map[string]any{"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": "v", "namespace": "ns"}}) {
		t.Errorf("bare VM slimmed to %v", got)
	}

	tomb := cache.DeletedFinalStateUnknown{Key: "default/v", Obj: slim}
	if o, err := vmsize.Slim(tomb); err != nil || !reflect.DeepEqual(o, tomb) {
		t.Errorf("tombstone: %v, %v; want it unchanged", o, err)
	}
	if strings.Contains(string(sb), "managedFields") {
		t.Error("managedFields kept")
	}
}
