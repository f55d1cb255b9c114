package vmsize

import (
	"strings"
	"testing"
)

func neon(cpus map[string]any, status map[string]any) map[string]any {
	o := map[string]any{"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": "db", "namespace": "n", "uid": "vm-uid"},
		"spec":     map[string]any{"guest": map[string]any{"cpus": cpus}}}
	if status != nil {
		o["status"] = status
	}
	return o
}

// The two modes differ only where the VM states no live size: the agent
// weighs by max (else min), the sizer requests nothing.
func TestFromObjectModes(t *testing.T) {
	tests := []struct {
		cpus      map[string]any
		live, req int64
		reqErr    string
	}{
		{cpus: map[string]any{"use": 2.0}, live: 2000, req: 2000},
		{cpus: map[string]any{"use": "3", "min": 1.0, "max": 4.0}, live: 3000, req: 3000},
		{cpus: map[string]any{"use": 8.0, "min": 1.0, "max": 4.0}, live: 4000, req: 4000},
		{cpus: map[string]any{"use": "100m", "min": "250m", "max": 4.0}, live: 250, req: 250},
		{cpus: map[string]any{"min": 1.0, "max": 4.0}, live: 4000, reqErr: "no spec.guest.cpus.use"},
		{cpus: map[string]any{"min": 1.0}, live: 1000, reqErr: "no spec.guest.cpus.use"},
	}
	for _, tt := range tests {
		live, err := FromObject(neon(tt.cpus, nil), Live)
		if err != nil || live.MilliCPU != tt.live {
			t.Errorf("%v live: %d, %v; want %d", tt.cpus, live.MilliCPU, err, tt.live)
		}
		req, err := FromObject(neon(tt.cpus, nil), Request)
		switch {
		case tt.reqErr != "" && (err == nil || !strings.Contains(err.Error(), tt.reqErr)):
			t.Errorf("%v request: %d, %v; want %q", tt.cpus, req.MilliCPU, err, tt.reqErr)
		case tt.reqErr == "" && (err != nil || req.MilliCPU != tt.req):
			t.Errorf("%v request: %d, %v; want %d", tt.cpus, req.MilliCPU, err, tt.req)
		}
	}
}

func TestFromObjectRefuses(t *testing.T) {
	for _, tt := range []struct {
		obj  map[string]any
		want string
	}{
		{neon(map[string]any{"use": 0.0}, nil), "must be above 0"},
		{neon(map[string]any{"use": 1e9}, nil), "above 8192 CPUs"},
		{neon(map[string]any{"use": "-2"}, nil), "negative"},
		{neon(map[string]any{"use": "9e2337203372"}, nil), "too large an exponent"},
		{neon(map[string]any{"use": true}, nil), "neither a quantity"},
		{neon(map[string]any{"min": 4.0, "max": 1.0}, nil), "min 4000m is above max 1000m"},
		{neon(map[string]any{}, nil), "no spec.guest.cpus.use, max or min"},
		{map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": map[string]any{"name": "v"},
			"spec": map[string]any{"domain": map[string]any{"cpu": map[string]any{"cores": 1.5}}}}, "whole number"},
		{map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p"}}, "neither a NeonVM"},
		{map[string]any{"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine"}, "no metadata.name"},
	} {
		if vm, err := FromObject(tt.obj, Live); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %+v, %v; want %q", tt.obj, vm, err, tt.want)
		}
	}
}

// A dynamic client decodes integral JSON numbers as int64, a JSON file
// reader as float64: both are sizes.
func TestFromObjectNumbers(t *testing.T) {
	for _, use := range []any{int64(3), float64(3), "3", "3000m", 3} {
		vm, err := FromObject(neon(map[string]any{"use": use}, nil), Live)
		if err != nil || vm.MilliCPU != 3000 {
			t.Errorf("use %T %v: %+v, %v", use, use, vm, err)
		}
	}
	vm, err := FromObject(map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": "v", "namespace": "n"},
		"spec":     map[string]any{"domain": map[string]any{"cpu": map[string]any{"sockets": int64(2), "cores": int64(2)}}},
		"status":   map[string]any{"activePods": map[string]any{"u2": "node-b", "u1": "node-a"}}}, Live)
	if err != nil || vm.MilliCPU != 4000 || strings.Join(vm.PodUIDs, ",") != "u1,u2" || vm.Kind != KubeVirt {
		t.Errorf("KubeVirt with int64 counts: %+v, %v", vm, err)
	}
}

// Only the status ties a VM to its pod: same namespace, and the name
// (NeonVM) or UID (KubeVirt) it gives.
func TestAttests(t *testing.T) {
	vm, err := FromObject(neon(map[string]any{"use": 1.0}, map[string]any{"podName": "db-runner"}), Live)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		ns, name, uid string
		want          bool
	}{
		{"n", "db-runner", "u", true},
		{"other", "db-runner", "u", false},
		{"n", "db-runner-2", "u", false},
		{"n", "", "", false},
	} {
		if got := vm.Attests(tt.ns, tt.name, tt.uid); got != tt.want {
			t.Errorf("%+v: %v", tt, got)
		}
	}
	none, _ := FromObject(neon(map[string]any{"use": 1.0}, nil), Live)
	if none.Attests("n", "", "") || none.Attests("n", "db-runner", "u") {
		t.Error("a VM whose status names no pod attests one")
	}
	kv := VM{Kind: KubeVirt, Namespace: "n", Name: "v", PodUIDs: []string{"u1", "u2"}}
	if !kv.Attests("n", "anything", "u2") || kv.Attests("n", "v", "u3") || kv.Attests("n", "v", "") {
		t.Error("KubeVirt's activePods not followed")
	}
}

func TestContainer(t *testing.T) {
	ann := func(c string) map[string]string { return map[string]string{AnnotationContainer: c} }
	for _, tt := range []struct {
		names []string
		kind  string
		ann   map[string]string
		want  int
		err   string
	}{
		{names: []string{"sidecar", "neonvm-runner"}, kind: NeonVM, want: 1},
		{names: []string{"sidecar", "compute"}, kind: KubeVirt, want: 1},
		{names: []string{"vm"}, kind: NeonVM, want: 0},
		{names: []string{"a", "vm"}, kind: NeonVM, ann: ann("vm"), want: 1},
		{names: []string{"neonvm-runner", "vm"}, kind: NeonVM, ann: ann("vm"), want: 1},
		{names: []string{"a", "b"}, kind: NeonVM, err: "2 containers, none named neonvm-runner: say which with annotation cgwarden.io/cpu-container"},
		{names: []string{"a"}, kind: NeonVM, ann: ann("nope"), err: `names container "nope", which the pod does not have`},
		{names: nil, kind: NeonVM, err: "no container"},
		{names: []string{"a", "b"}, kind: "annotation", err: "none named neonvm-runner or compute"},
	} {
		got, err := Container(tt.names, tt.kind, tt.ann)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%v %s %v: %d, %v; want %q", tt.names, tt.kind, tt.ann, got, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("%v %s %v: %d, %v; want %d", tt.names, tt.kind, tt.ann, got, err, tt.want)
		}
	}
}

func TestQuantity(t *testing.T) {
	for in, want := range map[string]int64{"250m": 250, "0.25": 250, "4": 4000, " 1 ": 1000} {
		if got, err := Quantity(in); err != nil || got != want {
			t.Errorf("Quantity(%q) = %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "abc", "-1", "9e2337203372", strings.Repeat("1", 65)} {
		if _, err := Quantity(in); err == nil {
			t.Errorf("Quantity(%q) accepted", in)
		}
	}
}

// FuzzFromObject: any spec.guest.cpus.use string gives a size within
// (0, MaxMilliCPU] or an error, in both modes, never a panic.
func FuzzFromObject(f *testing.F) {
	for _, s := range []string{"4", "250m", "0", "-1", "1e12", "8192", "8193", "", "x", "1Ki", "9e2337203372"} {
		f.Add(s, "1")
	}
	f.Fuzz(func(t *testing.T, use, lo string) {
		for _, mode := range []Mode{Live, Request} {
			vm, err := FromObject(neon(map[string]any{"use": use, "min": lo}, nil), mode)
			if err == nil && (vm.MilliCPU <= 0 || vm.MilliCPU > MaxMilliCPU) {
				t.Fatalf("use %q min %q: %dm accepted", use, lo, vm.MilliCPU)
			}
		}
	})
}
