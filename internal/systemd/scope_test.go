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
	limited := Limits{CPUWeight: 39, MemoryMax: 64 << 20}
	g := b.GrantScopes([]Scope{
		{Unit: scope, Slice: slice},
		{Unit: scope, Slice: slice, Limits: Limits{CPUWeight: 20000}},
		{Unit: scope, Slice: slice, Limits: Limits{CPUQuotaPeriodUSec: 100000}},
		{Unit: scope, Slice: slice, Limits: Limits{CPUQuotaPerSecUSec: 250000, CPUQuotaPeriodUSec: 10}},
		{Unit: "x.service", Slice: slice},
		{Unit: "cri-containerd-cd34.scope", Slice: "kubepods-besteffort-pod1.slice:cri-containerd:cd34"},
		{Unit: "../x.scope", Slice: slice},
	})
	for _, c := range []struct {
		name, unit, slice string
		limits            Limits
		pids              []int
	}{
		{"a scope the plan does not name", "cri-containerd-ef56.scope", slice, Limits{}, []int{42}},
		{"the named scope in another slice", scope, "kubepods-burstable-pod1.slice", Limits{}, []int{42}},
		{"the named scope with limits the plan did not name", scope, slice, limited, []int{42}},
		{"a weight systemd refuses", scope, slice, Limits{CPUWeight: 20000}, []int{42}},
		{"a period without a quota", scope, slice, Limits{CPUQuotaPeriodUSec: 100000}, []int{42}},
		{"a period of 10 µs", scope, slice, Limits{CPUQuotaPerSecUSec: 250000, CPUQuotaPeriodUSec: 10}, []int{42}},
		{"a service", "x.service", slice, Limits{}, []int{42}},
		{"a literal cgroup name as slice", "cri-containerd-cd34.scope", "kubepods-besteffort-pod1.slice:cri-containerd:cd34", Limits{}, []int{42}},
		{"a path as unit", "../x.scope", slice, Limits{}, []int{42}},
		{"no process", scope, slice, Limits{}, nil},
		{"PID 1", scope, slice, Limits{}, []int{1}},
		{"PID 0", scope, slice, Limits{}, []int{42, 0}},
		{"a negative PID", scope, slice, Limits{}, []int{-3}},
	} {
		s := Scope{Unit: c.unit, Slice: c.slice, Limits: c.limits}
		if err := g.StartScope(s, c.pids); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: StartScope(%+v, %v) = %v; want refused", c.name, s, c.pids, err)
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
	if err := b.Grant([]string{slice, scope}).StartScope(Scope{Unit: scope, Slice: slice}, []int{42}); !errors.Is(err, ErrRefused) {
		t.Errorf("a property grant started a scope: %v", err)
	}
	g.End()
	if err := g.StartScope(Scope{Unit: scope, Slice: slice}, []int{42}); !errors.Is(err, ErrRefused) {
		t.Errorf("an ended grant: %v", err)
	}
}

// TestLimitsProperties: the limits become the properties runc's systemd
// driver sets, and a zero field none.
func TestLimitsProperties(t *testing.T) {
	l := Limits{CPUWeight: 39, CPUQuotaPerSecUSec: 250000, CPUQuotaPeriodUSec: 100000, MemoryMax: 64 << 20, TasksMax: 50}
	if got, want := l.String(), "CPUWeight=39 CPUQuotaPerSecUSec=250000 CPUQuotaPeriodUSec=100000 MemoryMax=67108864 TasksMax=50"; got != want {
		t.Errorf("%+v: %q, want %q", l, got, want)
	}
	if got := (Limits{MemoryMax: 1 << 30}).String(); got != "MemoryMax=1073741824" {
		t.Errorf("memory alone: %q", got)
	}
	if got := (Limits{}).String(); got != "none" {
		t.Errorf("no limit: %q", got)
	}
}
