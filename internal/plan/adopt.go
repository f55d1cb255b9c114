package plan

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

// Input is what Adopt plans from.
type Input struct {
	Node   *inventory.Node
	Places mounts.Places
	// FS reads the current values the plan copies and replaces.
	FS cgroupfs.FS
	// Owned reports whether cgwarden created the cgroup at a host path
	// (its journal says so, and it was not undone).
	Owned func(hostPath string) bool
	// Pod narrows the plan to one pod (UID, name or namespace/name).
	Pod string
	// Only narrows the plan to these rules (empty: all); Adopt plans
	// nothing unless it names misplaced-container.
	Only []string
	// RemoveEmptySource removes the runtime's emptied cgroup.
	RemoveEmptySource bool
	// Units is systemd on a node it runs (see WeightInput.Units); nil
	// otherwise.
	Units Units
	// PlanUnconfirmed plans the unconfirmed containers too (see
	// inventory.Container.Unconfirmed). Only for a plan that is never
	// applied: a snapshot records the files such a plan reads.
	PlanUnconfirmed bool
	// Evidence, when set, must confirm each misplaced container by what
	// its runtime did (inventory.Evidence) before it is adopted: a name
	// that the metadata confirms is not enough, anyone with a delegated
	// cgroup subtree can copy it. Every engine that applies to a live
	// node sets it; nil only for plans that are not applied to one (a
	// snapshot's, a test's fake tree).
	Evidence Evidence
}

// Evidence confirms that a misplaced cgroup holds the container its name
// claims (inventory.Evidence): dirs are the cgroup's directory in each
// managed hierarchy.
type Evidence interface {
	Confirm(n *inventory.Node, p *inventory.Pod, c *inventory.Container, dirs []string) (ok bool, why string)
}

var _ Evidence = (*inventory.Evidence)(nil)

// Hierarchy is one mounted hierarchy cgwarden manages, with the
// controllers (v1 names) it carries.
type Hierarchy struct {
	Point       string
	Controllers []string
	// V2 marks the unified hierarchy.
	V2 bool
}

// Name says which hierarchy it is in plain words.
func (h Hierarchy) Name() string {
	if h.V2 {
		return "unified"
	}
	return strings.Join(h.Controllers, ",")
}

// Hierarchies lists the hierarchies a node's cgroups live in: the unified
// mount on v2; on v1 the cpu, cpuacct, memory and pids mounts (one entry
// per mount point, so a shared "cpu,cpuacct" mount appears once). Other
// v1 hierarchies (devices, freezer, blkio, ...) are left alone.
func Hierarchies(pl mounts.Places) []Hierarchy {
	if pl.V2 {
		return []Hierarchy{{Point: pl.Unified, Controllers: []string{"cpu", "cpuacct", "memory", "pids"}, V2: true}}
	}
	var out []Hierarchy
	for _, c := range []struct{ name, point string }{{"cpu", pl.CPU}, {"cpuacct", pl.CPUAcct}, {"memory", pl.Memory}, {"pids", pl.Pids}} {
		if c.point == "" {
			continue
		}
		if i := slices.IndexFunc(out, func(h Hierarchy) bool { return h.Point == c.point }); i >= 0 {
			out[i].Controllers = append(out[i].Controllers, c.name)
			continue
		}
		out = append(out, Hierarchy{Point: c.point, Controllers: []string{c.name}})
	}
	return out
}

func (h Hierarchy) has(ctl string) bool { return slices.Contains(h.Controllers, ctl) }

// setting is a resource file Adopt copies, with the controller it belongs
// to. Order matters: on v1 the period is set before the quota it is
// measured against.
type setting struct{ file, ctl string }

var (
	settingsV1 = []setting{{"cpu.shares", "cpu"}, {"cpu.cfs_period_us", "cpu"}, {"cpu.cfs_quota_us", "cpu"}, {"memory.limit_in_bytes", "memory"}, {"pids.max", "pids"}}
	settingsV2 = []setting{{"cpu.weight", "cpu"}, {"cpu.max", "cpu"}, {"memory.max", "memory"}, {"pids.max", "pids"}}
)

// Settings lists the files Adopt copies (and a revert restores) for a
// cgroup version.
func Settings(v2 bool) []string {
	s := settingsV1
	if v2 {
		s = settingsV2
	}
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = x.file
	}
	return out
}

// NoteV2Charges is said in every v2 plan that moves processes.
const NoteV2Charges = "cgroup v2 does not move memory charges with processes: memory the container used before the move stays charged to the runtime's cgroup until it is freed; new allocations are charged to the pod."

// NoteV1Charges is said in every v1 plan that moves processes.
const NoteV1Charges = "on cgroup v1 the new container cgroup gets memory.move_charge_at_immigrate=3, so the memory the processes use moves with them to the pod — on kernels that still move charges: Linux 6.13 removed charge moving (the file then refuses anything but 0), and there, as on v2, the charges stay in the runtime's cgroup until freed."

// refusedV1Charges is what a refused memory.move_charge_at_immigrate write
// means.
const refusedV1Charges = "this kernel no longer moves memory charges (removed in Linux 6.13): memory charged before the move stays with the runtime's cgroup until freed; new allocations are charged to the pod"

// NoteRuntime is said in every plan that adopts containers.
const NoteRuntime = "the runtime still believes the container lives in its own cgroup: processes it starts there later (exec, restarts) land outside the pod again; `cgwarden audit` or `cgwarden inspect` shows the container as misplaced again when that happens."

// adoptable reports whether Adopt considers c at all: a misplaced
// container. Runtime overhead (Kata, conmon) is the runtime's; a pod's
// misplaced sandbox (pause) is moved like a container.
func adoptable(c *inventory.Container) bool {
	return c.Misplaced && (!c.Sandbox || c.Cgroup.Identity.Kind == layout.Misplaced)
}

// Idle reports whether Adopt has nothing to consider in n: no pod has a
// misplaced container. The agent's adopter skips such a scan (most of
// them) without locking the journal; Adopt itself is not run.
func Idle(n *inventory.Node) bool {
	for _, pod := range n.Pods {
		if slices.ContainsFunc(pod.Containers, adoptable) {
			return false
		}
	}
	return true
}

// Adopt plans the repair of every misplaced container whose pod cgroup is
// known and whose metadata confirms it is the pod's (a cgroup that only its
// name attaches to the pod is skipped: anyone with a delegated cgroup
// subtree could have named it so): create the container's cgroup under its pod where the kubelet's
// layout puts it, copy its resource settings, and move its processes
// there. It returns the plan and the policy the plan is applied under.
func Adopt(in Input) (*Plan, Policy, error) {
	n := in.Node
	p := &Plan{Version: string(n.Version), Driver: string(n.Driver), Ops: []Op{}}
	var pol Policy
	if err := CheckOnly(in.Only); err != nil {
		return nil, pol, err
	}
	if n.KubeRoot == nil {
		p.Notes = append(p.Notes, "no kubepods hierarchy found: nothing to repair")
		return p, pol, nil
	}
	hs := Hierarchies(in.Places)
	for _, h := range hs {
		pol.Trees = append(pol.Trees, path.Join(h.Point, n.KubeRoot.Path))
	}
	pol.RemoveSources = in.RemoveEmptySource
	selected, err := MatchPod(n, in.Pod)
	if err != nil {
		return nil, pol, err
	}
	if len(in.Only) > 0 && !slices.Contains(in.Only, rules.MisplacedContainer) {
		return p, pol, nil
	}
	for _, pod := range selected {
		for _, c := range pod.Containers {
			if !adoptable(c) {
				continue
			}
			skip := func(why string) { p.Skipped = append(p.Skipped, Skip{Pod: pod.UID, Container: c.ID, Reason: why}) }
			if c.Unconfirmed != "" && !in.PlanUnconfirmed {
				skip(fmt.Sprintf("%s is not moved: only its name says it belongs to the pod (%s)", c.Cgroup.Path, c.Unconfirmed))
				continue
			}
			if pod.Cgroup == nil {
				skip("the pod has no cgroup in the kubelet's tree to move the container into")
				continue
			}
			if c.ID == "" {
				skip(fmt.Sprintf("%s names the pod but no container: cgwarden does not guess which container it is", c.Cgroup.Path))
				continue
			}
			if len(c.Cgroup.Children) > 0 {
				skip(fmt.Sprintf("%s has child cgroups; cgwarden moves only flat container cgroups", c.Cgroup.Path))
				continue
			}
			if in.Evidence != nil {
				dirs := make([]string, 0, len(hs))
				for _, h := range hs {
					dirs = append(dirs, path.Join(h.Point, c.Cgroup.Path))
				}
				if ok, why := in.Evidence.Confirm(n, pod, c, dirs); !ok {
					p.Skipped = append(p.Skipped, Skip{Pod: pod.UID, Container: c.ID, Cgroup: c.Cgroup.Path, Reason: why, Refused: true})
					continue
				}
			}
			ops, sources, owned, notes, err := adoptOne(in, hs, pod, c)
			if err != nil {
				skip(err.Error())
				continue
			}
			for _, n := range notes {
				p.Notes = appendOnce(p.Notes, n)
			}
			p.Ops = append(p.Ops, ops...)
			pol.Sources = append(pol.Sources, sources...)
			pol.Owned = append(pol.Owned, owned...)
		}
	}
	if slices.ContainsFunc(p.Ops, func(o Op) bool { return o.Kind == Move }) {
		if in.Places.V2 {
			p.Notes = appendOnce(p.Notes, NoteV2Charges)
		}
		p.Notes = appendOnce(p.Notes, NoteRuntime)
	}
	return p, pol, nil
}

func appendOnce(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// adoptOne plans one container.
func adoptOne(in Input, hs []Hierarchy, pod *inventory.Pod, c *inventory.Container) (ops []Op, sources, owned, notes []string, err error) {
	n := in.Node
	target, err := layout.ContainerPath(n.Driver, c.Runtime, pod.Cgroup.Path, c.ID)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	name := path.Base(target)
	short := c.ID[:12]
	op := func(o Op) Op { o.Rule, o.Pod, o.Container = rules.MisplacedContainer, pod.UID, c.ID; return o }
	scope, err := systemdScope(in, pod, target)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var pairs []Pair
	var targets []Hierarchy
	busy := false
	for _, h := range hs {
		podDir := path.Join(h.Point, pod.Cgroup.Path)
		kids, err := in.FS.ReadDirs(podDir)
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := in.FS.ReadFile(path.Join(h.Point, c.Cgroup.Path, "cgroup.procs")); serr == nil {
				notes = append(notes, fmt.Sprintf("pod cgroup %s does not exist in the %s hierarchy: container %s's processes stay in the runtime's cgroup there", pod.Cgroup.Path, h.Name(), short))
			}
			continue // nothing to create there
		}
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("reading the pod cgroup: %w", err)
		}
		tdir := path.Join(h.Point, target)
		if slices.Contains(kids, name) {
			if in.Owned == nil || !in.Owned(tdir) {
				return nil, nil, nil, nil, fmt.Errorf("%s already exists and cgwarden did not create it: not moving processes into a cgroup it was not asked about", tdir)
			}
		} else if scope != nil {
			// systemd makes the scope's cgroup, with the controllers
			// its slice gives it, when it starts the scope.
		} else {
			if in.Places.V2 {
				if w := enableControllers(in.FS, podDir); w != "" {
					cur, _ := readTrim(in.FS, path.Join(podDir, "cgroup.subtree_control"))
					ops = append(ops, op(Op{Kind: Write, Path: path.Join(podDir, "cgroup.subtree_control"), Value: w, Current: cur,
						Description: fmt.Sprintf("enable %s for the children of pod cgroup %s, so container %s can be limited there", w, pod.Cgroup.Path, short)}))
				}
			}
			ops = append(ops, op(Op{Kind: Mkdir, Path: tdir,
				Description: fmt.Sprintf("create cgroup %s for container %s (%s hierarchy), where the kubelet's layout puts it", target, short, h.Name())}))
		}
		owned = append(owned, tdir)
		targets = append(targets, h)
		src := path.Join(h.Point, c.Cgroup.Path)
		if procs, err := in.FS.ReadFile(path.Join(src, "cgroup.procs")); err == nil {
			pairs = append(pairs, Pair{Source: src, Target: tdir})
			sources = append(sources, src)
			busy = busy || len(strings.Fields(string(procs))) > 0
		}
	}
	if !busy && len(pairs) > 0 {
		// Already emptied (by an earlier fix, or the container stopped):
		// planning writes and a move of nothing would only add noise.
		return nil, nil, nil, nil, fmt.Errorf("%s holds no processes: nothing to move", c.Cgroup.Path)
	}
	if len(targets) == 0 {
		return nil, nil, nil, nil, fmt.Errorf("pod cgroup %s exists in none of the managed hierarchies", pod.Cgroup.Path)
	}
	if len(pairs) == 0 {
		return nil, nil, nil, nil, fmt.Errorf("%s has no cgroup.procs to move processes from", c.Cgroup.Path)
	}
	settings := settingsV1
	if in.Places.V2 {
		settings = settingsV2
	}
	if scope != nil {
		// The scope does not exist before the move starts it: what the
		// runtime set on its own cgroup goes to systemd as the scope's
		// properties instead of being written into it (see NoteScope).
		i := slices.IndexFunc(targets, func(h Hierarchy) bool { return h.has("cpu") || h.has("memory") })
		if i >= 0 {
			l, err := scopeLimits(in.FS, path.Join(targets[i].Point, c.Cgroup.Path))
			if err != nil {
				return nil, nil, nil, nil, fmt.Errorf("copying from %s: %w", c.Cgroup.Path, err)
			}
			scope.Limits = l
		}
		settings = nil
		notes = append(notes, NoteScope)
	}
	for _, s := range settings {
		i := slices.IndexFunc(targets, func(h Hierarchy) bool { return h.has(s.ctl) })
		if i < 0 {
			continue
		}
		h := targets[i]
		v, err := readTrim(in.FS, path.Join(h.Point, c.Cgroup.Path, s.file))
		if err != nil {
			continue // the runtime's cgroup lacks it (controller not there): nothing to copy
		}
		if err := Validate(s.file, v); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("copying from %s: %w", c.Cgroup.Path, err)
		}
		ops = append(ops, op(Op{Kind: Write, Path: path.Join(h.Point, target, s.file), Value: v,
			Description: fmt.Sprintf("copy %s = %s from the runtime's cgroup to container %s's new cgroup", s.file, v, short)}))
	}
	if !in.Places.V2 {
		if i := slices.IndexFunc(targets, func(h Hierarchy) bool { return h.has("memory") }); i >= 0 {
			podFile := path.Join(targets[i].Point, pod.Cgroup.Path, "memory.move_charge_at_immigrate")
			if _, err := in.FS.ReadFile(podFile); err == nil {
				ops = append(ops, op(Op{Kind: Write, Path: path.Join(targets[i].Point, target, "memory.move_charge_at_immigrate"), Value: "3",
					Optional: true, IfRefused: refusedV1Charges,
					Description: fmt.Sprintf("make memory charges follow container %s's processes into the pod (memory.move_charge_at_immigrate = 3)", short)}))
				notes = append(notes, NoteV1Charges)
			}
		}
	}
	mv := op(Op{Kind: Move, Pairs: pairs, Scope: scope,
		Description: fmt.Sprintf("move every process and thread of container %s from %s into %s, repeating until the source is empty", short, c.Cgroup.Path, target)})
	if scope != nil {
		mv.Description = fmt.Sprintf("ask systemd to start scope %s in the pod's slice %s with container %s's processes from %s and the runtime's limits as its properties (%s), and to attach any that follow, until the source is empty", scope.Unit, scope.Slice, short, c.Cgroup.Path, scope.Limits)
	}
	ops = append(ops, mv)
	if in.RemoveEmptySource {
		keep := Settings(in.Places.V2)
		for _, pr := range pairs {
			ops = append(ops, op(Op{Kind: Rmdir, Path: pr.Source, Keep: keep, IfGone: "gone already: the runtime removed its cgroup",
				Description: fmt.Sprintf("remove the runtime's emptied cgroup %s (--remove-empty-source)", pr.Source)}))
		}
	}
	return ops, sources, owned, notes, nil
}

// NoteScope says how a move through systemd keeps the container's limits.
const NoteScope = "on a node whose pods are systemd slices, systemd starts each adopted container's scope and moves its processes (the scope as runc's systemd driver names it); the weight and limits the runtime set on its own cgroup (cpu.weight, cpu.max, memory.max, pids.max) are given to the scope as its unit properties (CPUWeight, CPUQuotaPerSecUSec rounded up to 10 ms as runc's systemd driver does, CPUQuotaPeriodUSec, MemoryMax, TasksMax) rather than written into its files"

// scopeLimits reads the weight and limits the runtime set on a
// container's own cgroup (v2 files of dir) as the properties of the scope
// systemd starts for it. A file the cgroup lacks (its controller not
// enabled there), "max" and a zero are not set.
func scopeLimits(fsys cgroupfs.FS, dir string) (systemd.Limits, error) {
	var l systemd.Limits
	read := func(file string) (string, bool, error) {
		v, err := readTrim(fsys, path.Join(dir, file))
		if err != nil {
			return "", false, nil
		}
		if err := Validate(file, v); err != nil {
			return "", false, err
		}
		return v, true, nil
	}
	num := func(file, v string) (uint64, error) {
		if v == "max" {
			return 0, nil
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a number", file, v)
		}
		return n, nil
	}
	for _, f := range []struct {
		file string
		to   *uint64
	}{{"cpu.weight", &l.CPUWeight}, {"memory.max", &l.MemoryMax}, {"pids.max", &l.TasksMax}} {
		v, ok, err := read(f.file)
		if err != nil {
			return l, err
		}
		if ok {
			if *f.to, err = num(f.file, v); err != nil {
				return l, err
			}
		}
	}
	v, ok, err := read("cpu.max")
	if err != nil || !ok {
		return l, err
	}
	quota, period, found := strings.Cut(v, " ")
	if !found {
		period = "100000" // the kernel's default period
	}
	q, err := num("cpu.max", quota)
	if err != nil {
		return l, err
	}
	p, err := num("cpu.max", period)
	if err != nil {
		return l, err
	}
	if q > 0 && p > 0 {
		// systemd takes the quota per second of CPU time; runc's systemd
		// driver rounds it up to 10 ms, as older systemd keeps it in
		// whole percents.
		perSec := (q*1_000_000/p + 9_999) / 10_000 * 10_000
		l.CPUQuotaPerSecUSec, l.CPUQuotaPeriodUSec = perSec, p
	}
	return l, nil
}

// systemdScope is the scope a move into target goes through: when the
// node's cgroups are cgroup v2, systemd runs it (in.Units) and the pod's
// cgroup is a slice of its, the scope named as target's last element in
// that slice; nil otherwise (the move writes cgroup.procs).
func systemdScope(in Input, pod *inventory.Pod, target string) (*systemd.Scope, error) {
	if !in.Places.V2 || in.Units == nil {
		return nil, nil
	}
	slice, ok, err := in.Units.Manages(pod.Cgroup.Path)
	if err != nil {
		return nil, fmt.Errorf("asking systemd whether the pod's cgroup %s is its slice: %w", pod.Cgroup.Path, err)
	}
	if !ok || path.Ext(slice) != ".slice" || path.Ext(target) != ".scope" || path.Dir(target) != path.Clean(pod.Cgroup.Path) {
		return nil, nil
	}
	return &systemd.Scope{Unit: path.Base(target), Slice: slice}, nil
}

// enableControllers returns the cgroup.subtree_control write that enables
// cpu, memory and pids (those the pod cgroup has) for its children, or ""
// when they are enabled already. When cgroup.controllers cannot be read
// the three are asked for and the kernel will say if one is missing.
func enableControllers(fsys cgroupfs.FS, podDir string) string {
	have := []string{"cpu", "memory", "pids"}
	if t, err := readTrim(fsys, path.Join(podDir, "cgroup.controllers")); err == nil {
		f := strings.Fields(t)
		have = slices.DeleteFunc(have, func(c string) bool { return !slices.Contains(f, c) })
	}
	on, _ := readTrim(fsys, path.Join(podDir, "cgroup.subtree_control"))
	var want []string
	for _, c := range have {
		if !slices.Contains(strings.Fields(on), c) {
			want = append(want, "+"+c)
		}
	}
	return strings.Join(want, " ")
}

func readTrim(fsys cgroupfs.FS, p string) (string, error) {
	b, err := fsys.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}
