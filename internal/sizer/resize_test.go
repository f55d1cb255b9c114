package sizer

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	tests := []struct {
		name     string
		pod      *corev1.Pod
		vm       int64
		alloc    int64
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
			d := DecideResize(tt.pod, tt.vm, tt.alloc)
			if d.Action != tt.action || !strings.Contains(d.Reason, tt.reason) {
				t.Fatalf("%+v, want %s %q", d, tt.action, tt.reason)
			}
			if (tt.action == ActResize || tt.action == ActNone || tt.action == ActPending) && (d.From != tt.from || d.To != tt.to || d.Container != "neonvm-runner") {
				t.Fatalf("%+v, want %d → %d", d, tt.from, tt.to)
			}
		})
	}
}

func TestResizePatch(t *testing.T) {
	got := string(resizePatch(ResizeDecision{Container: "neonvm-runner", To: 1500}))
	if want := `{"spec":{"containers":[{"name":"neonvm-runner","resources":{"requests":{"cpu":"1500m"}}}]}}`; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}
