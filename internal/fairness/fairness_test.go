package fairness

import (
	"math"
	"testing"
)

func TestMilliCPUToShares(t *testing.T) {
	// Expected values from the kubelet's rule (DESIGN.md) and seed 000:
	// 2 CPUs → 2048; 250m+10m+10m = 270m → 276.
	for _, c := range []struct {
		milli int64
		want  uint64
	}{{0, 2}, {-5, 2}, {1, 2}, {2, 2}, {270, 276}, {1000, 1024}, {2000, 2048}, {256000, 262144}, {1 << 40, 262144}} {
		if got := MilliCPUToShares(c.milli); got != c.want {
			t.Errorf("MilliCPUToShares(%d) = %d, want %d", c.milli, got, c.want)
		}
	}
}

func TestSharesToWeight(t *testing.T) {
	// DESIGN.md: 1024 → 100 (runtime); 2 CPUs (2048) → 174 runtime, 79 linear.
	for _, c := range []struct {
		shares, linear, runtime uint64
	}{
		{0, 1, 0}, {2, 1, 1}, {1024, 39, 100}, {2048, 79, 174}, {262144, 10000, 10000}, {1 << 30, 10000, 10000},
	} {
		if got := SharesToWeightLinear(c.shares); got != c.linear {
			t.Errorf("SharesToWeightLinear(%d) = %d, want %d", c.shares, got, c.linear)
		}
		if got := SharesToWeightRuntime(c.shares); got != c.runtime {
			t.Errorf("SharesToWeightRuntime(%d) = %d, want %d", c.shares, got, c.runtime)
		}
	}
	// The runtime formula is monotonic over the whole range.
	prev := uint64(0)
	for s := uint64(2); s <= MaxShares; s += 97 {
		w := SharesToWeightRuntime(s)
		if w < prev || w < MinWeight || w > MaxWeight {
			t.Fatalf("SharesToWeightRuntime(%d) = %d after %d", s, w, prev)
		}
		prev = w
	}
}

func TestGuarantee(t *testing.T) {
	// Seed 000's kubepods.slice on a 16-CPU node, kubepods alone at the
	// root: BestEffort tier 2, Burstable 32076, a Guaranteed pod 2048.
	be := &Group{Weight: 2, Children: []*Group{{Weight: 2}, {Weight: 2}}}
	kube := &Group{Weight: 1024, Children: []*Group{be, {Weight: 32076}, {Weight: 2048}}}
	root := &Group{Children: []*Group{kube}}
	Guarantee(root, 16)
	wantTier := 16 * 2.0 / (2 + 32076 + 2048)
	if math.Abs(be.Guaranteed-wantTier) > 1e-12 {
		t.Fatalf("besteffort tier = %v, want %v", be.Guaranteed, wantTier)
	}
	if got := be.Children[0].Guaranteed; math.Abs(got-wantTier/2) > 1e-12 || got > 0.001 {
		t.Fatalf("besteffort pod = %v, want %v (< 0.001)", got, wantTier/2)
	}
	// v1 threads in a non-leaf cgroup count as siblings of 1024 each.
	p := &Group{Weight: 1024, Threads: 2, ThreadWeight: ThreadWeightV1, Children: []*Group{{Weight: 1024}}}
	Guarantee(&Group{Children: []*Group{p}}, 3)
	if got := p.Children[0].Guaranteed; math.Abs(got-1) > 1e-12 {
		t.Fatalf("child beside two threads = %v, want 1", got)
	}
}
