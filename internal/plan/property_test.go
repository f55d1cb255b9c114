package plan

import (
	"errors"
	"testing"
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
