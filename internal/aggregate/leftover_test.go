package aggregate

import (
	"testing"

	"github.com/cgwarden/cgwarden/internal/inventory"
)

// TestLeftoverIsCountedButNotOutside: after `cgwarden fix` moved a
// misplaced container home, the runtime's emptied directory is a leftover
// (inventory). Its figures still count toward the pod (the CPU it used
// before the move, memory still charged there), but the pod has no
// container outside its cgroup any more: cgwarden_pod_misplaced, which
// docs/metrics.md suggests alerting on, must go back to 0.
func TestLeftoverIsCountedButNotOutside(t *testing.T) {
	root := cg("/", nil, u64(1e12), f64(3), u64(1e9))
	kube := cg("/kubepods", root, u64(5e11), f64(2), u64(5e8))
	pod := cg("/kubepods/podA", kube, u64(300), f64(1.5), u64(3000))
	home := cg("/kubepods/podA/c2", pod, u64(200), f64(1.5), u64(2000))
	left := cg("/kubepods-podA.slice:cri-containerd:c2", root, u64(50), f64(0), u64(500))
	ap := ForPod(&inventory.Pod{UID: "a", Cgroup: pod, Containers: []*inventory.Container{
		{ID: "c2", Cgroup: home}, {ID: "c2", Cgroup: left, Leftover: true}}})
	if ap.Outside {
		t.Error("a pod whose only cgroup outside is an emptied leftover is reported as having containers outside")
	}
	if !eqU(ap.Usage.CPUUsageNs, u64(350)) || !eqU(ap.Usage.WorkingSetBytes, u64(3500)) || len(ap.Containers) != 1 {
		t.Errorf("cpu %v ws %v containers %d; want the leftover counted (350, 3500) and one container",
			deref(ap.Usage.CPUUsageNs), deref(ap.Usage.WorkingSetBytes), len(ap.Containers))
	}
}
