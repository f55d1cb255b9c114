package inventory

import (
	"testing"

	"github.com/cgwarden/cgwarden/internal/layout"
)

func TestMarkLeftovers(t *testing.T) {
	n := func(v int) *int { return &v }
	cg := func(path string, procs *int, kids int) *Cgroup {
		c := &Cgroup{Path: path, Identity: layout.Identity{Kind: layout.Misplaced}}
		c.Stats.Procs = procs
		for range kids {
			c.Children = append(c.Children, &Cgroup{})
		}
		return c
	}
	placed := &Container{ID: "a", Cgroup: cg("/kubepods.slice/pod/a", n(3), 0)}
	emptyTwin := &Container{ID: "a", Misplaced: true, Cgroup: cg("/pod:cri-containerd:a", n(0), 0)}
	busyTwin := &Container{ID: "a", Misplaced: true, Cgroup: cg("/elsewhere/a", n(1), 0)}
	unknownProcs := &Container{ID: "a", Misplaced: true, Cgroup: cg("/other/a", nil, 0)}
	withChild := &Container{ID: "a", Misplaced: true, Cgroup: cg("/nested/a", n(0), 1)}
	emptyAlone := &Container{ID: "b", Misplaced: true, Cgroup: cg("/pod:cri-containerd:b", n(0), 0)}
	// A v1 move cut off after the cpu hierarchy: empty there, processes
	// left in the memory or pids hierarchy.
	halfMoved := &Container{ID: "a", Misplaced: true, Cgroup: cg("/half:cri-containerd:a", n(0), 0)}
	p := &Pod{UID: "u", Containers: []*Container{placed, emptyTwin, busyTwin, unknownProcs, withChild, emptyAlone, halfMoved}}
	markLeftovers(p, func(c *Cgroup) bool { return c == halfMoved.Cgroup })
	for _, c := range []struct {
		name                string
		ctr                 *Container
		misplaced, leftover bool
	}{
		{"placed container", placed, false, false},
		{"empty twin of a placed container", emptyTwin, false, true},
		{"twin that still holds a process", busyTwin, true, false},
		{"twin whose processes are unknown", unknownProcs, true, false},
		{"twin with a child cgroup", withChild, true, false},
		{"empty cgroup with no placed twin", emptyAlone, true, false},
		{"twin empty in the cpu hierarchy only", halfMoved, true, false},
	} {
		if c.ctr.Misplaced != c.misplaced || c.ctr.Leftover != c.leftover {
			t.Errorf("%s: misplaced=%v leftover=%v, want %v %v", c.name, c.ctr.Misplaced, c.ctr.Leftover, c.misplaced, c.leftover)
		}
	}
}
