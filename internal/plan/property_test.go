package plan

import (
	"bytes"
	"errors"
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
		t.Error("the plan does not say that the runtime's limits are not copied to the scope")
	}
	mv := moves[0]
	for name, change := range map[string]func(o *Op){
		"another scope's name": func(o *Op) { o.Scope = &systemd.Scope{Unit: "cri-containerd-0.scope", Slice: mv.Scope.Slice} },
		"another slice":        func(o *Op) { o.Scope = &systemd.Scope{Unit: mv.Scope.Unit, Slice: "kubepods.slice"} },
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
