package weights

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

const seedDir = "../examples/snapshots/"

// example scans an embedded snapshot's last sample with its pods (and VMs)
// files.
func example(t *testing.T, name, pods, vms string) (*inventory.Node, mounts.Places, *metadata.Set) {
	t.Helper()
	raw, ok := examples.Open(name)
	if !ok {
		t.Fatalf("no example %s", name)
	}
	s, err := snapshot.Load(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := metadata.ReadPodsFile(seedDir + pods)
	if err != nil {
		t.Fatal(err)
	}
	meta := metadata.NewSet(ps)
	if vms != "" {
		f, err := os.Open(seedDir + vms)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		v, err := metadata.ParseVMs(f)
		if err != nil {
			t.Fatal(err)
		}
		meta.ApplyVMs(v)
	}
	sc, err := inventory.Open(s.Samples[len(s.Samples)-1].FS)
	if err != nil {
		t.Fatal(err)
	}
	sc.Meta = meta
	n, err := sc.Scan(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return n, sc.Places, meta
}

// Views of seed 000: the VM pods' guarantees now (a sliver) and at their
// targets (their sizes' share of the node, against 32076 Burstable shares
// and 9984 of Guaranteed pods on 48 CPUs).
func TestSeed000Views(t *testing.T) {
	n, _, meta := example(t, "seed-000-eks-neonvm", "seed-000-eks-neonvm.pods.json", "seed-000-eks-neonvm.vms.json")
	views, held := Views(n, meta, 0)
	if held {
		t.Error("seed 000's weights reported as held")
	}
	if len(views) != 3 {
		t.Fatalf("%d views, want 3", len(views))
	}
	for _, v := range views {
		if v.Weight == nil || *v.Weight != 2 || v.Target != fairness.MilliCPUToShares(v.MilliCPU) {
			t.Errorf("%s: weight %v target %d", v.Pod.UID, v.Weight, v.Target)
		}
		if v.Guaranteed > 0.001 {
			t.Errorf("%s: guaranteed %.4f now, want a sliver", v.Pod.UID, v.Guaranteed)
		}
		// The tier's share of kubepods at its target, split by weight.
		tierShare := float64(v.TierTarget) / float64(v.TierTarget+32076+9984)
		podShare := float64(v.Target) / float64(v.TierTarget-2+2) // + the unsized pod's 2
		want := n.KubeRoot.GuaranteedCores * tierShare * podShare
		if d := v.AtTarget/want - 1; d > 0.01 || d < -0.01 {
			t.Errorf("%s (%dm): guaranteed %.3f at target, want %.3f", v.Pod.UID, v.MilliCPU, v.AtTarget, want)
		}
	}
}

// A node without sized pods has no views, even with a BestEffort tier
// cgwarden raised for pods since deleted (plan.Targets then lowers it).
func TestNoSizedPodsNoViews(t *testing.T) {
	n, _, _ := example(t, "seed-000-eks-neonvm", "seed-000-eks-neonvm.pods.json", "")
	meta := metadata.NewSet(nil)
	for _, c := range n.KubeRoot.Children {
		if c.Identity.QoS == "besteffort" {
			raised := uint64(4098)
			c.Stats.CPU.Weight = &raised
		}
	}
	if views, held := Views(n, meta, 0); len(views) != 0 || held {
		t.Errorf("views of a node without sized pods: %d (held %v)", len(views), held)
	}
}
