package systemd_test

import (
	"os"
	"path"
	"strings"
	"testing"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"

	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

func readWeight(t *testing.T, cg string) string {
	t.Helper()
	b, err := os.ReadFile(path.Join("/sys/fs/cgroup", cg, "cpu.weight"))
	if err != nil {
		t.Fatalf("reading %s/cpu.weight: %v", cg, err)
	}
	return strings.TrimSpace(string(b))
}

func writeWeight(t *testing.T, cg, v string) {
	t.Helper()
	// The test's own tree (realtest.SystemdTree), nothing else.
	if err := os.WriteFile(path.Join("/sys/fs/cgroup", cg, "cpu.weight"), []byte(v), 0); err != nil {
		t.Fatalf("writing %s/cpu.weight: %v", cg, err)
	}
}

// TestSystemdDirectWriteVsReload measures what systemd does to a weight
// written straight into a unit's cpu.weight, behind its back, on the
// occasions a node sees all the time: a daemon-reload (every package
// upgrade), a property set on the same unit (the kubelet resizing a pod),
// and a new scope started in the slice (a container created). The
// measurement goes to the log as MEASURE lines (docs/systemd.md quotes
// them); the test fails only if a weight set as a unit property (what
// cgwarden does on such a node, package systemd) does not survive the same
// events, which is what the property path relies on.
func TestSystemdDirectWriteVsReload(t *testing.T) {
	tree := realtest.NewSystemdTree(t)
	pod := tree.PodSlice("5f3c1e2a-0000-4000-8000-000000000001")
	podCg := tree.CgroupOf(pod)
	scope, _ := tree.Scope(pod, strings.Repeat("a1", 32))
	scopeCg := tree.CgroupOf(scope)
	t.Logf("pod slice %s (%s) at cpu.weight %s; its container scope %s at %s", pod, podCg, readWeight(t, podCg), scope, readWeight(t, scopeCg))

	measure := func(event string, do func()) (pod, ctr string) {
		t.Helper()
		writeWeight(t, podCg, "160")
		writeWeight(t, scopeCg, "160")
		do()
		pod, ctr = readWeight(t, podCg), readWeight(t, scopeCg)
		t.Logf("MEASURE direct write 160, then %s: pod slice cpu.weight %s, container scope cpu.weight %s", event, pod, ctr)
		return pod, ctr
	}
	measure("nothing", func() {})
	measure("daemon-reload", tree.Reload)
	measure("SetUnitProperties MemoryHigh on the pod slice", func() {
		if err := tree.Conn.SetUnitProperties(pod, true, sd.Property{Name: "MemoryHigh", Value: godbus.MakeVariant(uint64(1 << 30))}); err != nil {
			t.Fatal(err)
		}
	})
	measure("a second container scope started in the pod slice", func() { tree.Scope(pod, strings.Repeat("b2", 32)) })
	measure("SetUnitProperties CPUWeight on the tier (the kubelet's QoS update)", func() {
		if err := tree.Conn.SetUnitProperties(tree.Tier(), true, sd.Property{Name: "CPUWeight", Value: godbus.MakeVariant(uint64(1))}); err != nil {
			t.Fatal(err)
		}
	})

	// The property path: set as the kubelet sets it, it must survive.
	bus, err := systemd.Open(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	g := bus.Grant([]string{pod, scope})
	for _, u := range []string{pod, scope} {
		if err := g.SetProperty(u, systemd.CPUWeight, 160); err != nil {
			t.Fatal(err)
		}
	}
	g.End()
	for _, ev := range []struct {
		name string
		do   func()
	}{
		{"nothing", func() {}},
		{"daemon-reload", tree.Reload},
		{"SetUnitProperties MemoryHigh on the pod slice", func() {
			if err := tree.Conn.SetUnitProperties(pod, true, sd.Property{Name: "MemoryHigh", Value: godbus.MakeVariant(uint64(2 << 30))}); err != nil {
				t.Fatal(err)
			}
		}},
		{"a third container scope started in the pod slice", func() { tree.Scope(pod, strings.Repeat("c3", 32)) }},
	} {
		ev.do()
		p, c := readWeight(t, podCg), readWeight(t, scopeCg)
		t.Logf("MEASURE property CPUWeight=160, then %s: pod slice cpu.weight %s, container scope cpu.weight %s", ev.name, p, c)
		if p != "160" || c != "160" {
			t.Errorf("after %s, a weight set as a unit property is not held: pod slice %s, scope %s, want 160", ev.name, p, c)
		}
	}
	for _, u := range []string{pod, scope} {
		v, err := bus.Property(u, systemd.CPUWeight)
		if err != nil || v != 160 {
			t.Errorf("systemd's %s CPUWeight = %d, %v; want 160", u, v, err)
		}
	}
	if err := g.SetProperty(pod, systemd.CPUWeight, 1); err == nil {
		t.Error("an ended grant still set a property")
	}
	if err := bus.Grant([]string{pod}).SetProperty(tree.Tier(), systemd.CPUWeight, 1); err == nil {
		t.Error("a grant set a property of a unit it does not name")
	}
}
