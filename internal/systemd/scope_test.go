package systemd

import (
	"errors"
	"testing"
)

// TestStartScopeRefuses checks the grant's refusals, which come before any
// call to systemd (the Bus here has no connection: a call would panic).
func TestStartScopeRefuses(t *testing.T) {
	const (
		scope = "cri-containerd-ab12.scope"
		slice = "kubepods-besteffort-pod1.slice"
	)
	b := &Bus{}
	g := b.GrantScopes([]Scope{
		{Unit: scope, Slice: slice},
		{Unit: "x.service", Slice: slice},
		{Unit: "cri-containerd-cd34.scope", Slice: "kubepods-besteffort-pod1.slice:cri-containerd:cd34"},
		{Unit: "../x.scope", Slice: slice},
	})
	for _, c := range []struct {
		name, unit, slice string
		pids              []int
	}{
		{"a scope the plan does not name", "cri-containerd-ef56.scope", slice, []int{42}},
		{"the named scope in another slice", scope, "kubepods-burstable-pod1.slice", []int{42}},
		{"a service", "x.service", slice, []int{42}},
		{"a literal cgroup name as slice", "cri-containerd-cd34.scope", "kubepods-besteffort-pod1.slice:cri-containerd:cd34", []int{42}},
		{"a path as unit", "../x.scope", slice, []int{42}},
		{"no process", scope, slice, nil},
		{"PID 1", scope, slice, []int{1}},
		{"PID 0", scope, slice, []int{42, 0}},
		{"a negative PID", scope, slice, []int{-3}},
	} {
		if err := g.StartScope(c.unit, c.slice, c.pids); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: StartScope(%q, %q, %v) = %v; want refused", c.name, c.unit, c.slice, c.pids, err)
		}
	}
	if b.Writes() != 0 {
		t.Errorf("refused starts counted as writes: %d", b.Writes())
	}
	// A grant of scopes sets no property, and one of properties starts no
	// scope.
	if err := g.SetProperty(slice, CPUWeight, 100); !errors.Is(err, ErrRefused) {
		t.Errorf("a scope grant set a property: %v", err)
	}
	if err := b.Grant([]string{slice, scope}).StartScope(scope, slice, []int{42}); !errors.Is(err, ErrRefused) {
		t.Errorf("a property grant started a scope: %v", err)
	}
	g.End()
	if err := g.StartScope(scope, slice, []int{42}); !errors.Is(err, ErrRefused) {
		t.Errorf("an ended grant: %v", err)
	}
}
