package sizer

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

func runningRunner(req, limit string, conds ...corev1.PodCondition) *corev1.Pod {
	p := runnerPod()
	p.Status.Phase = corev1.PodRunning
	p.Status.QOSClass = corev1.PodQOSBurstable
	if req != "" {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(req)}
	} else {
		p.Status.QOSClass = corev1.PodQOSBestEffort
	}
	if limit != "" {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limit)}
	}
	p.Status.Conditions = conds
	return p
}

func TestDecideResize(t *testing.T) {
	pending := func(reason string) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: reason, Message: "Node didn't have enough capacity"}
	}
	deleting := runningRunner("1", "")
	deleting.DeletionTimestamp = &metav1.Time{}
	starting := runningRunner("1", "")
	starting.Status.Phase = corev1.PodPending
	// runnerPod's namespace, ns, bounded at 2 CPUs (--max-size ns=2).
	bounds, err := vmsize.ParseMaxSizes("ns=2")
	if err != nil {
		t.Fatal(err)
	}
	ns2 := bounds.For("ns")
	tests := []struct {
		name     string
		pod      *corev1.Pod
		vm       int64
		alloc    int64
		bound    vmsize.Bound
		action   Action
		from, to int64
		reason   string
	}{
		{name: "equal", pod: runningRunner("1", ""), vm: 1000, alloc: 4000, action: ActNone, from: 1000, to: 1000},
		{name: "grow", pod: runningRunner("1", ""), vm: 3000, alloc: 4000, action: ActResize, from: 1000, to: 3000},
		{name: "shrink", pod: runningRunner("3", ""), vm: 2000, alloc: 4000, action: ActResize, from: 3000, to: 2000},
		{name: "milli", pod: runningRunner("1", ""), vm: 250, alloc: 4000, action: ActResize, from: 1000, to: 250},
		{name: "cut to allocatable", pod: runningRunner("1", ""), vm: 8000, alloc: 4000, action: ActResize, from: 1000, to: 4000, reason: "cut to the node's allocatable 4"},
		{name: "already at allocatable", pod: runningRunner("4", ""), vm: 8000, alloc: 4000, action: ActNone, from: 4000, to: 4000},
		{name: "allocatable unknown", pod: runningRunner("1", ""), vm: 8000, action: ActResize, from: 1000, to: 8000},
		// --max-size: the namespace's bound holds as the node's does, the
		// lower of the two.
		{name: "cut to the namespace's bound", pod: runningRunner("1", ""), vm: 8000, alloc: 4000, bound: ns2, action: ActResize, from: 1000, to: 2000,
			reason: "VM size 8 cut to namespace ns's --max-size bound ns=2"},
		{name: "bound, allocatable unknown", pod: runningRunner("1", ""), vm: 8000, bound: ns2, action: ActResize, from: 1000, to: 2000, reason: "--max-size bound ns=2"},
		{name: "already at the bound", pod: runningRunner("2", ""), vm: 8000, alloc: 4000, bound: ns2, action: ActNone, from: 2000, to: 2000},
		{name: "within the bound", pod: runningRunner("1", ""), vm: 1500, alloc: 4000, bound: ns2, action: ActResize, from: 1000, to: 1500},
		{name: "allocatable below the bound", pod: runningRunner("1", ""), vm: 8000, alloc: 1500, bound: ns2, action: ActResize, from: 1000, to: 1500,
			reason: "cut to the node's allocatable 1500m"},
		{name: "shrunk to a lowered bound", pod: runningRunner("3", ""), vm: 3000, alloc: 4000, bound: ns2, action: ActResize, from: 3000, to: 2000, reason: "bound ns=2"},
		{name: "BestEffort", pod: runningRunner("", ""), vm: 1000, alloc: 4000, action: ActNotSized, reason: "recreate the pod"},
		{name: "pending infeasible: report, do not retry", pod: runningRunner("3", "", pending("Infeasible")), vm: 3000, alloc: 4000, action: ActPending, from: 3000, to: 3000, reason: "Infeasible"},
		{name: "pending deferred", pod: runningRunner("3", "", pending("Deferred")), vm: 3000, alloc: 4000, action: ActPending, from: 3000, to: 3000, reason: "Deferred"},
		{name: "pending, then a new size: resize", pod: runningRunner("3", "", pending("Infeasible")), vm: 2000, alloc: 4000, action: ActResize, from: 3000, to: 2000},
		{name: "limit below the size", pod: runningRunner("1", "2"), vm: 3000, alloc: 4000, action: ActSkip, reason: "limit 2 is below"},
		{name: "limit above the size", pod: runningRunner("1", "4"), vm: 3000, alloc: 4000, action: ActResize, from: 1000, to: 3000},
		{name: "being deleted", pod: deleting, vm: 3000, action: ActSkip, reason: "deleted"},
		{name: "not running yet", pod: starting, vm: 3000, action: ActSkip, reason: "not running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := DecideResize(tt.pod, tt.vm, tt.alloc, tt.bound)
			if d.Action != tt.action || !strings.Contains(d.Reason, tt.reason) {
				t.Fatalf("%+v, want %s %q", d, tt.action, tt.reason)
			}
			if (tt.action == ActResize || tt.action == ActNone || tt.action == ActPending) && (d.From != tt.from || d.To != tt.to || d.Container != "neonvm-runner") {
				t.Fatalf("%+v, want %d → %d", d, tt.from, tt.to)
			}
		})
	}
}

// unsizedRunner is a running runner pod admitted without a CPU request
// (the webhook down or overloaded: failurePolicy Ignore) but with a
// memory request, so Burstable; qos "" leaves its status's class unset.
func unsizedRunner(qos corev1.PodQOSClass) *corev1.Pod {
	p := runningRunner("", "")
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}
	p.Status.QOSClass = qos
	return p
}

// A pod admitted unsized is sized later by the resize path when a resize
// can add its request (Burstable: the API server keeps the class), on the
// pod when it has pod-level resources, and is reported, not patched, when
// it is BestEffort.
func TestDecideResizeAdmittedUnsized(t *testing.T) {
	podLevelMem := unsizedRunner(corev1.PodQOSBurstable)
	podLevelMem.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	podLevelMem.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}}
	noClass := runningRunner("", "")
	noClass.Status.QOSClass = ""
	otherRequests := unsizedRunner(corev1.PodQOSBurstable)
	otherRequests.Spec.Containers = append(otherRequests.Spec.Containers, corev1.Container{Name: "log",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}})
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		vm        int64
		action    Action
		podLevel  bool
		container string
		to        int64
		reason    string
	}{
		{name: "Burstable: a request added", pod: unsizedRunner(corev1.PodQOSBurstable), vm: 1500, action: ActResize, container: "neonvm-runner", to: 1500, reason: "admitted without a CPU request"},
		{name: "Burstable, cut to allocatable", pod: unsizedRunner(corev1.PodQOSBurstable), vm: 8000, action: ActResize, container: "neonvm-runner", to: 4000, reason: "cut to the node's allocatable"},
		{name: "no class in the status, a memory request", pod: unsizedRunner(""), vm: 1000, action: ActResize, container: "neonvm-runner", to: 1000},
		{name: "pod-level memory: added on the pod", pod: podLevelMem, vm: 2000, action: ActResize, podLevel: true, to: 2000},
		{name: "BestEffort", pod: runningRunner("", ""), vm: 1000, action: ActNotSized, reason: "recreate the pod"},
		{name: "no class in the status, no request", pod: noClass, vm: 1000, action: ActNotSized, reason: "BestEffort"},
		{name: "another container requests CPU", pod: otherRequests, vm: 1000, action: ActSkip, reason: "has no CPU request"},
	} {
		d := DecideResize(tc.pod, tc.vm, 4000, vmsize.Bound{})
		if d.Action != tc.action || !strings.Contains(d.Reason, tc.reason) {
			t.Errorf("%s: %+v, want %s %q", tc.name, d, tc.action, tc.reason)
			continue
		}
		if tc.action != ActResize {
			continue
		}
		if !d.Added || d.From != 0 || d.To != tc.to || d.PodLevel != tc.podLevel || d.Container != tc.container {
			t.Errorf("%s: %+v, want a request of %d added (pod level %v, container %q)", tc.name, d, tc.to, tc.podLevel, tc.container)
		}
		// However small the size, a first request is never a step too
		// small to make.
		if got := WithMinStep(d, 100000, 0); got.Action != ActResize {
			t.Errorf("%s: with a minimum step: %+v", tc.name, got)
		}
	}
}

func TestResizePatch(t *testing.T) {
	got := string(resizePatch(ResizeDecision{Container: "neonvm-runner", To: 1500}))
	if want := `{"spec":{"containers":[{"name":"neonvm-runner","resources":{"requests":{"cpu":"1500m"}}}]}}`; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}
