package fairness

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestWaterFill(t *testing.T) {
	leaf := func(w float64, demands ...float64) *DemandGroup { return &DemandGroup{Weight: w, Own: demands} }

	t.Run("all busy: shares by weight, like Guarantee", func(t *testing.T) {
		a, b, c := leaf(1, 1), leaf(2, 1), leaf(4, 1)
		WaterFill(&DemandGroup{Children: []*DemandGroup{a, b, c}}, 1)
		for _, x := range []struct {
			g    *DemandGroup
			want float64
		}{{a, 1.0 / 7}, {b, 2.0 / 7}, {c, 4.0 / 7}} {
			if !near(x.g.Fair, x.want) {
				t.Errorf("fair %v, want %v", x.g.Fair, x.want)
			}
		}
	})
	t.Run("a capped group's surplus goes to the others by weight", func(t *testing.T) {
		// Weights 1:2:4:4 on one core; the last wants only 0.1 (its quota).
		a, b, c := leaf(1, 1), leaf(2, 1), leaf(4, 1)
		d := &DemandGroup{Weight: 4, Own: []float64{1}, Cap: 0.1}
		WaterFill(&DemandGroup{Children: []*DemandGroup{a, b, c, d}}, 1)
		if !near(d.Fair, 0.1) || !near(d.Demand, 0.1) {
			t.Fatalf("capped group: fair %v demand %v, want 0.1", d.Fair, d.Demand)
		}
		for _, x := range []struct {
			g    *DemandGroup
			want float64
		}{{a, 0.9 / 7}, {b, 1.8 / 7}, {c, 3.6 / 7}} {
			if !near(x.g.Fair, x.want) {
				t.Errorf("fair %v, want %v", x.g.Fair, x.want)
			}
		}
	})
	t.Run("idle capacity stays idle", func(t *testing.T) {
		a, b := leaf(1, 0.2), leaf(1000, 0.3)
		root := &DemandGroup{Children: []*DemandGroup{a, b}}
		WaterFill(root, 4)
		if !near(a.Fair, 0.2) || !near(b.Fair, 0.3) || !near(root.Fair, 0.5) {
			t.Fatalf("fair %v %v root %v, want 0.2 0.3 0.5", a.Fair, b.Fair, root.Fair)
		}
	})
	t.Run("hierarchy: a parent's share is split among its busy children", func(t *testing.T) {
		// Seed-000 shape in miniature: a busy tier of weight 1000 beside a
		// tier of weight 2 holding a 4-CPU VM and a 1-CPU VM; 8 cores.
		busy := leaf(1000, 8)
		vm4, vm1 := leaf(2, 1, 1, 1, 1), leaf(2, 1)
		be := &DemandGroup{Weight: 2, Children: []*DemandGroup{vm4, vm1}}
		root := &DemandGroup{Children: []*DemandGroup{busy, be}}
		WaterFill(root, 8)
		wantBE := 8 * 2.0 / 1002
		if !near(be.Fair, wantBE) || !near(vm4.Fair, wantBE/2) || !near(vm1.Fair, wantBE/2) {
			t.Fatalf("BestEffort %v (want %v), VMs %v %v (want half each)", be.Fair, wantBE, vm4.Fair, vm1.Fair)
		}
		if !near(be.Demand, 5) {
			t.Errorf("BestEffort demand %v, want 5", be.Demand)
		}
	})
	t.Run("v1 threads in a non-leaf compete at 1024 each", func(t *testing.T) {
		child := leaf(1024, 1)
		parent := &DemandGroup{Weight: 1, Own: []float64{1, 0}, Children: []*DemandGroup{child}}
		WaterFill(&DemandGroup{Children: []*DemandGroup{parent}}, 1)
		if !near(child.Fair, 0.5) || !near(parent.Fair, 1) {
			t.Fatalf("child %v parent %v, want 0.5 and 1 (the idle thread takes nothing)", child.Fair, parent.Fair)
		}
	})
	t.Run("fair never exceeds demand nor the parent's share", func(t *testing.T) {
		kids := []*DemandGroup{leaf(3, 0.05), leaf(7, 2), leaf(1, 0.7), leaf(50, 0)}
		root := &DemandGroup{Children: kids}
		WaterFill(root, 2)
		sum := 0.0
		for _, k := range kids {
			if k.Fair > k.Demand+1e-12 {
				t.Errorf("fair %v above demand %v", k.Fair, k.Demand)
			}
			sum += k.Fair
		}
		if sum > 2+1e-9 || !near(sum, math.Min(2, root.Demand)) {
			t.Errorf("children got %v of 2 cores (demand %v)", sum, root.Demand)
		}
	})
}
