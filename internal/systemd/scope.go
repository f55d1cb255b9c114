package systemd

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// Scope is a move a plan names: the processes of one container, found
// outside their pod, put by systemd into a new transient scope Unit
// (cri-containerd-<id>.scope, the name runc's systemd driver would have
// given it) in the pod's slice Slice, with Limits, what the runtime had
// set on the container's own cgroup, as the scope's properties.
type Scope struct {
	Unit, Slice string
	Limits      Limits `json:",omitzero"`
}

// Limits are a container's limits and weight as unit properties, read
// from the cgroup v2 files of the cgroup its runtime made (package plan):
// what runc's systemd driver would have given the scope. A zero field is
// not set (systemd's default: no limit, the default weight).
type Limits struct {
	// CPUWeight is cpu.weight (1–10000).
	CPUWeight uint64 `json:",omitempty"`
	// CPUQuotaPerSecUSec and CPUQuotaPeriodUSec are cpu.max: the quota
	// per second of CPU time, and the period (both µs).
	CPUQuotaPerSecUSec uint64 `json:",omitempty"`
	CPUQuotaPeriodUSec uint64 `json:",omitempty"`
	// MemoryMax is memory.max (bytes).
	MemoryMax uint64 `json:",omitempty"`
	// TasksMax is pids.max.
	TasksMax uint64 `json:",omitempty"`
}

// check refuses values systemd would refuse or that no runtime sets.
func (l Limits) check() error {
	switch {
	case l.CPUWeight > 10000:
		return fmt.Errorf("CPUWeight %d out of 1–10000", l.CPUWeight)
	case l.CPUQuotaPeriodUSec != 0 && (l.CPUQuotaPeriodUSec < 1000 || l.CPUQuotaPeriodUSec > 1000000):
		return fmt.Errorf("CPUQuotaPeriodUSec %d out of 1 ms–1 s", l.CPUQuotaPeriodUSec)
	case l.CPUQuotaPeriodUSec != 0 && l.CPUQuotaPerSecUSec == 0:
		return fmt.Errorf("CPUQuotaPeriodUSec %d without a quota", l.CPUQuotaPeriodUSec)
	}
	return nil
}

// properties are the unit properties of l (none for a zero field).
func (l Limits) properties() []sd.Property {
	var props []sd.Property
	add := func(name string, v uint64) {
		if v != 0 {
			props = append(props, sd.Property{Name: name, Value: godbus.MakeVariant(v)})
		}
	}
	add("CPUWeight", l.CPUWeight)
	add("CPUQuotaPerSecUSec", l.CPUQuotaPerSecUSec)
	add("CPUQuotaPeriodUSec", l.CPUQuotaPeriodUSec)
	add("MemoryMax", l.MemoryMax)
	add("TasksMax", l.TasksMax)
	return props
}

// String lists the set limits as systemd names them, for a plan's words.
func (l Limits) String() string {
	var out []string
	for _, p := range l.properties() {
		out = append(out, fmt.Sprintf("%s=%v", p.Name, p.Value.Value()))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}

// GrantScopes returns a writer that may start exactly these scopes, each
// in its own slice, and set no property, until End.
func (b *Bus) GrantScopes(scopes []Scope) *Grant {
	return &Grant{b: b, scopes: slices.Clone(scopes)}
}

// StartScope asks systemd to start s.Unit as a transient scope in s.Slice
// and to move pids into it: StartTransientUnit with Slice=, PIDs=, the
// properties runc's systemd driver gives a container's scope (Delegate=yes,
// no default dependencies, accounting on) and s.Limits. It returns when
// systemd's job has finished.
//
// The move is made by systemd (PID 1, in the root cgroup namespace), not
// by the caller: a write to cgroup.procs from a container's cgroup
// namespace is refused with ENOENT when the source or destination lies
// outside that namespace and cgroup2 is mounted nsdelegate, as systemd
// mounts it (internal/systemd TestSystemdAgentInCgroupNamespace,
// docs/systemd.md). The scope is then systemd's unit, as a container's
// scope is on such a node: it goes when its last process exits.
//
// A unit that is not a scope, a slice that is not active (systemd would
// create a slice named in Slice= that does not exist, and it reports such
// a slice "loaded" too), a PID below 2, limits out of systemd's ranges, or
// a scope the grant does not name (limits included) is refused.
func (g *Grant) StartScope(s Scope, pids []int) error {
	unit, slice := s.Unit, s.Slice
	switch {
	case g.ended.Load():
		return fmt.Errorf("systemd %s in %s: the grant has ended: %w", unit, slice, ErrRefused)
	case !slices.Contains(g.scopes, s):
		return fmt.Errorf("systemd %s in %s: not a scope the plan names: %w", unit, slice, ErrRefused)
	case !unitName(unit, ".scope") || !unitName(slice, ".slice"):
		return fmt.Errorf("systemd %s in %s: want a scope in a slice: %w", unit, slice, ErrRefused)
	}
	if err := s.Limits.check(); err != nil {
		return fmt.Errorf("systemd %s in %s: %v: %w", unit, slice, err, ErrRefused)
	}
	ids, err := moveable(unit, slice, pids)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := g.b.active(ctx, slice); err != nil {
		return err
	}
	props := []sd.Property{
		sd.PropDescription("cgwarden: container processes adopted into their pod"),
		sd.PropSlice(slice),
		{Name: "Delegate", Value: godbus.MakeVariant(true)},
		{Name: "DefaultDependencies", Value: godbus.MakeVariant(false)},
		{Name: "CPUAccounting", Value: godbus.MakeVariant(true)},
		{Name: "MemoryAccounting", Value: godbus.MakeVariant(true)},
		{Name: "TasksAccounting", Value: godbus.MakeVariant(true)},
		sd.PropPids(ids...),
	}
	props = append(props, s.Limits.properties()...)
	g.b.writes.Add(1)
	done := make(chan string, 1)
	if _, err := g.b.conn.StartTransientUnitContext(ctx, unit, "fail", props, done); err != nil {
		return g.b.wrap("starting", unit, "scope", err)
	}
	select {
	case r := <-done:
		if r != "done" {
			return fmt.Errorf("systemd: starting scope %s in %s: job %s", unit, slice, r)
		}
	case <-ctx.Done():
		return fmt.Errorf("systemd: starting scope %s in %s: %w", unit, slice, ctx.Err())
	}
	return nil
}

// Attach asks systemd to move pids into unit, a scope this grant started
// (StartScope) that still runs: AttachProcessesToUnit (systemd 238 and
// later), for the processes a move finds in its source after the scope
// started. As StartScope, the move is systemd's own.
func (g *Grant) Attach(unit string, pids []int) error {
	switch {
	case g.ended.Load():
		return fmt.Errorf("systemd %s: the grant has ended: %w", unit, ErrRefused)
	case !slices.ContainsFunc(g.scopes, func(s Scope) bool { return s.Unit == unit }):
		return fmt.Errorf("systemd %s: not a scope the plan names: %w", unit, ErrRefused)
	}
	ids, err := moveable(unit, "", pids)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := g.b.active(ctx, unit); err != nil {
		return err
	}
	g.b.writes.Add(1)
	if err := g.b.conn.AttachProcessesToUnit(ctx, unit, "", ids); err != nil {
		return g.b.wrap("attaching processes to", unit, "scope", err)
	}
	return nil
}

// moveable checks the processes a scope is asked to take: at least one,
// none below 2 (PID 1 is systemd), each a uint32.
func moveable(unit, slice string, pids []int) ([]uint32, error) {
	where := unit
	if slice != "" {
		where += " in " + slice
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("systemd %s: no process to move: %w", where, ErrRefused)
	}
	ids := make([]uint32, 0, len(pids))
	for _, p := range pids {
		if p < 2 || int64(p) > int64(^uint32(0)) {
			return nil, fmt.Errorf("systemd %s: process %d cannot be moved: %w", where, p, ErrRefused)
		}
		ids = append(ids, uint32(p))
	}
	return ids, nil
}

// active reports whether unit is active now (ActiveState "active"): a pod
// slice the kubelet made is; one nobody made is not.
func (b *Bus) active(ctx context.Context, unit string) error {
	return b.inState(ctx, unit, "ActiveState", "active")
}

// unitName reports whether name is a plain unit name of type ext: no path,
// no escape, no template, not empty before the suffix.
func unitName(name, ext string) bool {
	return path.Ext(name) == ext && len(name) > len(ext) && !strings.ContainsAny(name, "/\\:@")
}
