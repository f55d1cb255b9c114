package plan

import (
	"bytes"
	"errors"
	"io/fs"
	"path"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/snapshot"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

// TestPolicyProperty: a Property operation may set only the weight
// property behind a weight file the plan computed, of the unit whose
// cgroup holds that file, to a value in range.
func TestPolicyProperty(t *testing.T) {
	const (
		pod  = "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice"
		unit = "kubepods-besteffort-pod1.slice"
	)
	pol := Policy{Trees: []string{"/sys/fs/cgroup/kubepods.slice"}, Weights: []string{pod + "/cpu.weight", "/sys/fs/cgroup/kubepods/besteffort/cpu.shares"}}
	ok := Op{Kind: Property, Path: pod + "/cpu.weight", Unit: unit, Property: "CPUWeight", Value: "157"}
	if err := pol.Check(ok); err != nil {
		t.Fatalf("policy refused %+v: %v", ok, err)
	}
	with := func(f func(*Op)) Op { o := ok; f(&o); return o }
	refused := map[string]Op{
		"another unit":            with(func(o *Op) { o.Unit = "kubepods-besteffort.slice" }),
		"a service":               with(func(o *Op) { o.Unit = "containerd.service" }),
		"another property":        with(func(o *Op) { o.Property = "MemoryMax" }),
		"shares behind weight":    with(func(o *Op) { o.Property = "CPUShares" }),
		"no property":             with(func(o *Op) { o.Property = "" }),
		"out of range":            with(func(o *Op) { o.Value = "0" }),
		"not a number":            with(func(o *Op) { o.Value = "1; rm" }),
		"a weight not computed":   with(func(o *Op) { o.Path = pod + "/../cpu.weight"; o.Unit = "kubepods-besteffort.slice" }),
		"outside the tree":        with(func(o *Op) { o.Path = "/sys/fs/cgroup/kubepods/besteffort/cpu.shares"; o.Unit = "besteffort" }),
		"a file behind no weight": with(func(o *Op) { o.Path = pod + "/memory.max"; o.Value = "100" }),
	}
	for name, op := range refused {
		err := pol.Check(op)
		var ve *ValueError
		if !errors.Is(err, ErrPolicy) && !errors.As(err, &ve) {
			t.Errorf("%s: Check = %v, want a refusal", name, err)
		}
	}
}

// units is systemd as a plan sees it on seed 000's node: every slice and
// scope of the snapshot is a unit (or none is, with none), its weight
// property at what props says (default the kubelet's: the file's value).
type units struct {
	none  bool
	props map[string]uint64
	asked []string
}

func (u *units) Manages(cg string) (string, bool, error) {
	name := path.Base(cg)
	if u.none || (path.Ext(name) != ".slice" && path.Ext(name) != ".scope") {
		return "", false, nil
	}
	return name, true, nil
}

func (u *units) Property(unit, name string) (uint64, error) {
	u.asked = append(u.asked, unit+" "+name)
	if v, ok := u.props[unit]; ok {
		return v, nil
	}
	return 2, nil // the seed's BestEffort pods and tier: 2 shares
}

// TestWeightsThroughSystemd plans seed 000's weights (a systemd-driver
// node on cgroup v1) with systemd's units: every target becomes a
// CPUShares property of its unit, which the policy allows; without units,
// or where systemd manages none of the cgroups, the same targets are
// writes; a unit whose property and file are both at the target needs
// nothing, one whose file is but whose property is not (a direct write
// daemon-reload would undo) needs the property.
func TestWeightsThroughSystemd(t *testing.T) {
	pods, err := metadata.ReadPodsFile("../examples/snapshots/seed-000-eks-neonvm.pods.json")
	if err != nil {
		t.Fatal(err)
	}
	meta := metadata.NewSet(pods)
	n, sc := scanExample(t, "seed-000-eks-neonvm", meta)
	in := WeightInput{Node: n, Places: sc.Places, FS: sc.FS, Meta: meta}

	plain, _, err := Weights(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Ops) == 0 || slices.ContainsFunc(plain.Ops, func(o Op) bool { return o.Kind != Write }) {
		t.Fatalf("without systemd: %d operations, want only writes: %+v", len(plain.Ops), plain.Ops)
	}
	in.Units = &units{none: true}
	if p, _, err := Weights(in); err != nil || !slices.EqualFunc(p.Ops, plain.Ops, func(a, b Op) bool { return a.Kind == b.Kind && a.Path == b.Path }) {
		t.Errorf("systemd managing none of the cgroups: %+v (%v), want the same writes", p.Ops, err)
	}

	u := &units{}
	in.Units = u
	p, pol, err := Weights(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Ops) != len(plain.Ops) {
		t.Fatalf("with systemd: %d operations, want %d", len(p.Ops), len(plain.Ops))
	}
	for i, op := range p.Ops {
		if op.Kind != Property || op.Property != "CPUShares" || op.Unit != path.Base(path.Dir(op.Path)) || op.Path != plain.Ops[i].Path || op.Value != plain.Ops[i].Value {
			t.Errorf("operation %d: %+v, want CPUShares of the unit holding %s set to %s", i+1, op, plain.Ops[i].Path, plain.Ops[i].Value)
		}
	}
	if err := pol.CheckAll(p.Ops); err != nil {
		t.Errorf("the policy refuses its own plan: %v", err)
	}
	for _, tg := range p.Targets {
		if tg.Unit == "" || tg.Property != "CPUShares" {
			t.Errorf("target %s: unit %q property %q, want its unit and CPUShares", tg.Path, tg.Unit, tg.Property)
		}
	}

	// Every property at its target but the files still at the seed's 2
	// (written behind systemd's back since): the properties are set again,
	// which makes systemd write the files. (Both at the target plan
	// nothing: the systemd guest's TestSystemdWeightsThroughUnits.)
	u.props = map[string]uint64{}
	for _, op := range p.Ops {
		v, _ := strconv.ParseUint(op.Value, 10, 64)
		u.props[op.Unit] = v
	}
	p2, _, err := Weights(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(p2.Ops) != len(p.Ops) || slices.ContainsFunc(p2.Ops, func(o Op) bool { return o.Kind != Property }) {
		t.Errorf("properties at target, files not: %+v, want %d property operations", p2.Ops, len(p.Ops))
	}
}

// scanExample scans the first sample of an embedded example snapshot with
// meta.
func scanExample(t *testing.T, name string, meta *metadata.Set) (*inventory.Node, *inventory.Scanner) {
	t.Helper()
	b, ok := examples.Open(name)
	if !ok {
		t.Fatalf("no embedded %s snapshot", name)
	}
	s, err := snapshot.Load(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := inventory.Open(s.Samples[0].FS)
	if err != nil {
		t.Fatal(err)
	}
	sc.Meta = meta
	n, err := sc.Scan(time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	return n, sc
}

// TestAdoptThroughSystemd plans seed 003's adoption (a systemd-driver
// node on cgroup v2) with systemd's units: each container's move names the
// scope systemd is to start in its pod's slice, with no mkdir and no copy
// into a cgroup that does not exist before the move, and the policy takes
// it; a scope named for another cgroup or put in another slice is
// refused. Without units the plan is the one of TestAdoptSeed003Golden.
func TestAdoptThroughSystemd(t *testing.T) {
	n, sc := seed003(t)
	plain, _, err := Adopt(Input{Node: n, Places: sc.Places, FS: sc.FS})
	if err != nil {
		t.Fatal(err)
	}
	p, pol, err := Adopt(Input{Node: n, Places: sc.Places, FS: sc.FS, Units: &units{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pol.CheckAll(p.Ops); err != nil {
		t.Fatalf("the plan breaks its own policy: %v", err)
	}
	var moves []Op
	for _, op := range p.Ops {
		switch op.Kind {
		case Move:
			moves = append(moves, op)
		case Mkdir, Write:
			t.Errorf("%s %s: systemd makes the scope's cgroup; nothing is made or written beside it", op.Kind, op.Path)
		}
	}
	plainMoves := slices.DeleteFunc(slices.Clone(plain.Ops), func(o Op) bool { return o.Kind != Move })
	if len(moves) == 0 || len(moves) != len(plainMoves) {
		t.Fatalf("%d moves through systemd, %d without", len(moves), len(plainMoves))
	}
	for i, mv := range moves {
		target := mv.Pairs[0].Target
		if mv.Scope == nil || mv.Scope.Unit != "cri-containerd-"+mv.Container+".scope" || mv.Scope.Unit != path.Base(target) ||
			mv.Scope.Slice != path.Base(path.Dir(target)) || !reflect.DeepEqual(mv.Pairs, plainMoves[i].Pairs) {
			t.Errorf("move %d: scope %+v, pairs %v (without systemd %v)", i, mv.Scope, mv.Pairs, plainMoves[i].Pairs)
		}
	}
	if !slices.Contains(p.Notes, NoteScope) {
		t.Error("the plan does not say how the runtime's limits reach the scope")
	}
	// The seed's container limits (500m, 600M) and the weight its runtime
	// gave it: written into the new cgroup without systemd, the scope's
	// properties with it.
	want := systemd.Limits{CPUWeight: 100, CPUQuotaPerSecUSec: 500000, CPUQuotaPeriodUSec: 100000, MemoryMax: 600000000}
	for _, op := range plain.Ops {
		if op.Kind == Write && path.Base(op.Path) == "memory.max" && op.Value != "600000000" {
			t.Fatalf("the fixture's memory.max is %s: the expectation below is stale", op.Value)
		}
	}
	for i, mv := range moves {
		if mv.Scope != nil && mv.Scope.Limits != want {
			t.Errorf("move %d: the scope's limits %v, want the runtime's %v", i, mv.Scope.Limits, want)
		}
	}
	mv := moves[0]
	for name, change := range map[string]func(o *Op){
		"another scope's name": func(o *Op) { o.Scope = &systemd.Scope{Unit: "cri-containerd-0.scope", Slice: mv.Scope.Slice} },
		"another slice": func(o *Op) {
			o.Scope = &systemd.Scope{Unit: mv.Scope.Unit, Slice: "kubepods.slice", Limits: mv.Scope.Limits}
		},
		"not a scope": func(o *Op) {
			o.Scope = &systemd.Scope{Unit: path.Base(o.Pairs[0].Target) + ".service", Slice: mv.Scope.Slice}
		},
	} {
		op := mv
		op.Pairs = slices.Clone(mv.Pairs)
		change(&op)
		if err := pol.Check(op); !errors.Is(err, ErrPolicy) {
			t.Errorf("%s: Check = %v, want a refusal", name, err)
		}
	}
}

// scopeFS is a cgroup directory's files for scopeLimits.
type scopeFS map[string]string

func (f scopeFS) ReadFile(p string) ([]byte, error) {
	if v, ok := f[path.Base(p)]; ok {
		return []byte(v + "\n"), nil
	}
	return nil, fs.ErrNotExist
}
func (scopeFS) ReadDirs(string) ([]string, error) { return nil, nil }

// TestScopeLimits: the runtime's files as a scope's properties: "max"
// and missing files set nothing, a quota is per second of CPU rounded up
// to 10 ms (runc's systemd driver), a bad value is an error.
func TestScopeLimits(t *testing.T) {
	for _, c := range []struct {
		name  string
		files scopeFS
		want  systemd.Limits
		err   bool
	}{
		{"nothing", scopeFS{}, systemd.Limits{}, false},
		{"no limit", scopeFS{"cpu.weight": "39", "cpu.max": "max 100000", "memory.max": "max", "pids.max": "max"}, systemd.Limits{CPUWeight: 39}, false},
		{"every limit", scopeFS{"cpu.weight": "8", "cpu.max": "25000 100000", "memory.max": "67108864", "pids.max": "50"},
			systemd.Limits{CPUWeight: 8, CPUQuotaPerSecUSec: 250000, CPUQuotaPeriodUSec: 100000, MemoryMax: 64 << 20, TasksMax: 50}, false},
		{"a third of a CPU, rounded up", scopeFS{"cpu.max": "33333 100000"}, systemd.Limits{CPUQuotaPerSecUSec: 340000, CPUQuotaPeriodUSec: 100000}, false},
		{"a quota without a period", scopeFS{"cpu.max": "50000"}, systemd.Limits{CPUQuotaPerSecUSec: 500000, CPUQuotaPeriodUSec: 100000}, false},
		{"a weight out of range", scopeFS{"cpu.weight": "0"}, systemd.Limits{}, true},
		{"memory in words", scopeFS{"memory.max": "lots"}, systemd.Limits{}, true},
		{"a period of 10 µs", scopeFS{"cpu.max": "5000 10"}, systemd.Limits{}, true},
	} {
		got, err := scopeLimits(c.files, "/sys/fs/cgroup/x")
		if (err != nil) != c.err || (!c.err && got != c.want) {
			t.Errorf("%s: %+v, %v; want %+v (error: %v)", c.name, got, err, c.want, c.err)
		}
	}
}
