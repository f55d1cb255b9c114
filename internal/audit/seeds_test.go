package audit

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

const seedDir = "../examples/snapshots/"

// loadExample scans an embedded snapshot's samples (with rates when it has
// two) and reads its pods and VMs files when named.
func loadExample(t *testing.T, name, podsFile, vmsFile string) *Input {
	t.Helper()
	raw, ok := examples.Open(name)
	if !ok {
		t.Fatalf("no example %s", name)
	}
	s, err := snapshot.Load(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var meta *metadata.Set
	if podsFile != "" {
		f, err := os.Open(seedDir + podsFile)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		pods, err := metadata.ParsePods(f)
		if err != nil {
			t.Fatal(err)
		}
		meta = metadata.NewSet(pods)
	}
	if vmsFile != "" {
		f, err := os.Open(seedDir + vmsFile)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		vms, err := metadata.ParseVMs(f)
		if err != nil {
			t.Fatal(err)
		}
		if un := meta.ApplyVMs(vms); len(un) > 0 {
			t.Fatalf("VMs without a pod: %v", un)
		}
	}
	prev, err := (&inventory.Sampling{Meta: meta}).TakeAll(s.Samples)
	if err != nil {
		t.Fatal(err)
	}
	return &Input{Node: prev, Meta: meta}
}

// TestSeed000 is the done-when check of seed 000 with its pods file alone
// (the runners' -vmspec arguments give the VM sizes) and with the VMs file
// too: the starved VMs and the size-blind tier come first, with the seed's
// numbers.
func TestSeed000(t *testing.T) {
	for _, vms := range []string{"", "seed-000-eks-neonvm.vms.json"} {
		t.Run("vms="+vms, func(t *testing.T) {
			in := loadExample(t, "seed-000-eks-neonvm", "seed-000-eks-neonvm.pods.json", vms)
			r := Run(in)
			if len(r.Findings) < 4 {
				t.Fatalf("%d findings, want at least 4", len(r.Findings))
			}
			sizes := map[float64]bool{}
			for _, f := range r.Findings[:3] {
				if f.Rule != rules.BestEffortStarvation || f.Severity != Error {
					t.Fatalf("finding %s/%s for %s, want besteffort-starvation errors first", f.Severity, f.Rule, f.Subject)
				}
				ev := f.Evidence
				if v, _ := ev.Get("tierWeight"); v != uint64(2) {
					t.Errorf("%s: tier weight %v, want the seed's 2", f.Subject, v)
				}
				if v, _ := ev.Get("podWeight"); v != uint64(2) {
					t.Errorf("%s: pod weight %v, want the seed's 2", f.Subject, v)
				}
				// Siblings: the seed's Burstable tier 32076 and Guaranteed
				// pods, among them the overprovisioning pod's 2048.
				if v, _ := ev.Get("tierSiblingsWeight"); v.(float64) < 32076+2048 {
					t.Errorf("%s: siblings' weight %v, want at least 32076 + 2048", f.Subject, v)
				}
				if !strings.Contains(ev.Summary, "32076 (Burstable tier)") {
					t.Errorf("summary does not show the Burstable tier's 32076: %s", ev.Summary)
				}
				if v, _ := ev.Get("podGuaranteedCores"); v.(float64) >= 0.01 {
					t.Errorf("%s: guaranteed %v cores, want far below 0.01", f.Subject, v)
				}
				sz, _ := ev.Get("sizeCores")
				sizes[sz.(float64)] = true
			}
			for _, want := range []float64{0.25, 1, 4} {
				if !sizes[want] {
					t.Errorf("no starved VM of %v CPUs among %v", want, sizes)
				}
			}
			sb := r.Findings[3]
			if sb.Rule != rules.SizeBlindWeights || sb.Severity != Error || !strings.HasSuffix(sb.Subject.Cgroup, "kubepods-besteffort.slice") {
				t.Fatalf("fourth finding %s/%s for %s, want size-blind-weights on the BestEffort tier", sb.Severity, sb.Rule, sb.Subject)
			}
			rows, _ := sb.Evidence.Get("pods")
			seen := map[float64]uint64{}
			for _, row := range rows.([]map[string]any) {
				seen[row["sizeCores"].(float64)] = row["weight"].(uint64)
			}
			if len(seen) != 3 || seen[0.25] != 2 || seen[1] != 2 || seen[4] != 2 {
				t.Errorf("size-blind rows %v, want VMs of 0.25, 1 and 4 CPUs at 2 shares each", seen)
			}
			for _, f := range r.Findings[4:] {
				if f.Rule == rules.TierDrift || f.Rule == rules.OrphanCgroup || f.Rule == rules.MisplacedContainer {
					t.Errorf("unexpected %s finding on seed 000: %s: %s", f.Rule, f.Subject, f.Evidence.Summary)
				}
			}
		})
	}
}

// TestSeed000WithoutMetadata: without a pods file the BestEffort pods are
// still reported, as warnings, and the rules that need sizes say so.
func TestSeed000WithoutMetadata(t *testing.T) {
	r := Run(loadExample(t, "seed-000-eks-neonvm", "", ""))
	if len(r.Findings) != 4 {
		t.Fatalf("%d findings, want the 4 BestEffort pods", len(r.Findings))
	}
	for _, f := range r.Findings {
		if f.Rule != rules.BestEffortStarvation || f.Severity != Warning {
			t.Errorf("%s/%s for %s, want besteffort-starvation warnings only", f.Severity, f.Rule, f.Subject)
		}
	}
	for _, want := range []string{rules.SizeBlindWeights + " not checked", rules.OrphanCgroup + " not checked", "give --pods"} {
		if !strings.Contains(strings.Join(r.Notes, "\n"), want) {
			t.Errorf("notes %q do not say %q", r.Notes, want)
		}
	}
}

// TestSeed003 is the done-when check of seed 003: the misplaced container
// and the pod that reads 0 come first.
func TestSeed003(t *testing.T) {
	r := Run(loadExample(t, "seed-003-k3s-spin", "", ""))
	if len(r.Findings) < 2 {
		t.Fatalf("%d findings, want at least 2", len(r.Findings))
	}
	m, g := r.Findings[0], r.Findings[1]
	if m.Rule != rules.MisplacedContainer || m.Severity != Error || m.Subject.ContainerID != "c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00" {
		t.Errorf("first finding %s/%s for %s, want misplaced-container c339025b…", m.Severity, m.Rule, m.Subject)
	}
	if g.Rule != rules.PodAccountingGap || g.Subject.PodUID != "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c" {
		t.Fatalf("second finding %s/%s for %s, want pod-accounting-gap of pod 99afd520-…", g.Severity, g.Rule, g.Subject)
	}
	pod, _ := g.Evidence.Get("podCgroupUsageCores")
	ctr, _ := g.Evidence.Get("containersUsageCores")
	// The seed's second sample: the container's usage_usec went from
	// 25442435 to 26392435 in 1 s; the pod cgroup stayed at 0.
	if pod.(float64) != 0 || ctr.(float64) != 0.95 {
		t.Errorf("pod %v cores, containers %v, want 0 and 0.95", pod, ctr)
	}
	for _, f := range r.Findings {
		if f.Rule == rules.PodAccountingGap && f.Subject.PodUID != "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c" {
			t.Errorf("accounting gap reported for a pod whose containers are all inside it: %s", f.Evidence.Summary)
		}
	}
}

// TestMetadataDrivenRules changes the seed-000 metadata the way real
// clusters drift: a pod whose requests no longer match its weight, and a
// pod cgroup whose pod is gone from the API.
func TestMetadataDrivenRules(t *testing.T) {
	f, err := os.Open(seedDir + "seed-000-eks-neonvm.pods.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pods, err := metadata.ParsePods(f)
	if err != nil {
		t.Fatal(err)
	}
	var kept []metadata.Pod
	var gone, drifted string
	for _, p := range pods {
		switch {
		case p.Name == "prometheus-agent-0":
			gone = p.UID // its cgroup stays: an orphan with processes
			continue
		case strings.HasPrefix(p.Name, "compute-orange-recipe"):
			drifted = p.UID
			m := int64(1000) // the spec now says 1 CPU; the cgroup still has 276
			p.RequestMilliCPU = &m
		}
		kept = append(kept, p)
	}
	in := loadExample(t, "seed-000-eks-neonvm", "", "")
	in.Meta = metadata.NewSet(kept)
	r := Run(in)
	var orphan, drift, tier bool
	for _, f := range r.Findings {
		switch {
		case f.Rule == rules.OrphanCgroup && f.Subject.PodUID == gone:
			orphan = f.Severity == Warning
		case f.Rule == rules.TierDrift && f.Subject.Cgroup != "" && strings.Contains(f.Subject.Cgroup, strings.ReplaceAll(drifted, "-", "_")):
			w, _ := f.Evidence.Get("weight")
			e, _ := f.Evidence.Get("expectedWeight")
			drift = w == uint64(276) && e == uint64(1024)
		case f.Rule == rules.TierDrift && f.Subject.Kind == "tier":
			tier = true
		}
	}
	if !orphan {
		t.Error("no orphan-cgroup warning for the pod removed from the metadata")
	}
	if !drift {
		t.Error("no tier-drift finding 276 vs 1024 for the pod whose requests changed")
	}
	if !tier {
		t.Error("no tier-drift finding for the Burstable tier whose requests grew by 730m")
	}
}

// TestEveryExample runs the audit on every embedded snapshot, with and
// without rates, and checks that it neither panics nor leaves findings
// unsorted or incomplete.
func TestEveryExample(t *testing.T) {
	for _, name := range examples.Names() {
		for _, oneSample := range []bool{false, true} {
			in := loadExample(t, name, "", "")
			if oneSample {
				in.Node.Root.Walk(func(c *inventory.Cgroup) { c.UsageCores = nil })
			}
			r := Run(in)
			sorted := append([]Finding(nil), r.Findings...)
			Sort(sorted)
			for i, f := range r.Findings {
				if f.Rule != sorted[i].Rule || f.Subject != sorted[i].Subject {
					t.Errorf("%s: findings not sorted at %d", name, i)
				}
				if f.Message == "" || f.Remedy == "" || f.Evidence.Summary == "" || f.Severity.Rank() > 2 {
					t.Errorf("%s: incomplete finding %+v", name, f)
				}
			}
		}
	}
}
