package aggregate

import (
	"testing"

	"github.com/cgwarden/cgwarden/internal/inventory"
)

// TestContainerInTwoCgroupsIsOneContainer: after `cgwarden fix` moved a
// container home, its runtime may start new processes (an exec) in its
// own misplaced cgroup again, so one container ID has two busy cgroups.
// The container is one container whose usage is both (metrics-server
// sums the container series, and a series per cgroup would collide on
// its labels), named by its cgroup in the pod.
func TestContainerInTwoCgroupsIsOneContainer(t *testing.T) {
	root := cg("/", nil, u64(1e12), f64(3), u64(1e9))
	kube := cg("/kubepods", root, u64(5e11), f64(2), u64(5e8))
	pod := cg("/kubepods/podA", kube, u64(300), f64(1.5), u64(3000))
	home := cg("/kubepods/podA/c2", pod, u64(200), f64(1.25), u64(2000))
	stray := cg("/kubepods-podA.slice:cri-containerd:c2", root, u64(50), f64(0.25), u64(500))
	// Scan order puts the literal root-level directory first.
	ap := ForPod(&inventory.Pod{UID: "a", Cgroup: pod, Containers: []*inventory.Container{
		{ID: "c2", Cgroup: stray, Misplaced: true}, {ID: "c2", Cgroup: home}}})
	if len(ap.Containers) != 1 {
		t.Fatalf("%d containers for one container ID, want 1", len(ap.Containers))
	}
	c := ap.Containers[0]
	if !eqU(c.Usage.CPUUsageNs, u64(250)) || !eqF(c.Usage.CPUCores, f64(1.5)) || !eqU(c.Usage.WorkingSetBytes, u64(2500)) || c.Usage.MemoryLimitBytes != nil {
		t.Errorf("container usage cpu %v cores %v ws %v limit %v; want both cgroups (250, 1.5, 2500) and no single limit",
			deref(c.Usage.CPUUsageNs), deref(c.Usage.CPUCores), deref(c.Usage.WorkingSetBytes), deref(c.Usage.MemoryLimitBytes))
	}
	if c.Cgroup != home {
		t.Errorf("container named by %s, want its cgroup in the pod", c.Cgroup.Path)
	}
	if !ap.Outside || !eqU(ap.Usage.CPUUsageNs, u64(350)) {
		t.Errorf("pod outside %v cpu %v; want true, 350", ap.Outside, deref(ap.Usage.CPUUsageNs))
	}
}
