package audit

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// cg is one cgroup of a small cgroup v2 snapshot built by v2Node: its path,
// cpu.weight, number of processes and CPU used (µs) in the first and the
// second sample, one second apart.
type cg struct {
	path         string
	weight       uint64
	procs        int
	used1, used2 uint64
}

// v2Node writes a two-sample v2 snapshot of the given cgroups (2 CPUs) and
// scans it with meta, as the CLI does.
func v2Node(t *testing.T, meta *metadata.Set, cgs ...cg) *inventory.Node {
	t.Helper()
	var b strings.Builder
	b.WriteString("cgwarden snapshot v1\ntaken: 2026-01-01T00:00:00Z\ninterval: 1s\n")
	b.WriteString("-- /proc/self/mountinfo --\n35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	b.WriteString("-- /sys/devices/system/cpu/online --\n0-1\n")
	for _, c := range cgs {
		d := "/sys/fs/cgroup" + c.path
		fmt.Fprintf(&b, "-- %s/cpu.weight --\n%d\n-- %s/cpu.max --\nmax 100000\n", d, c.weight, d)
		fmt.Fprintf(&b, "-- %s/cpu.stat --\nusage_usec %d\n", d, c.used1)
		fmt.Fprintf(&b, "-- %s/cgroup.procs --\n", d)
		for i := 0; i < c.procs; i++ {
			fmt.Fprintf(&b, "%d\n", 100+i)
		}
	}
	for _, c := range cgs {
		fmt.Fprintf(&b, "-- next:/sys/fs/cgroup%s/cpu.stat --\nusage_usec %d\n", c.path, c.used2)
	}
	s, err := snapshot.Load(bytes.NewReader([]byte(b.String())))
	if err != nil {
		t.Fatal(err)
	}
	prev, err := (&inventory.Sampling{Meta: meta}).TakeAll(s.Samples)
	if err != nil {
		t.Fatal(err)
	}
	return prev
}

const (
	uidA = "11111111-1111-4111-8111-111111111111"
	uidB = "22222222-2222-4222-8222-222222222222"
	uidC = "33333333-3333-4333-8333-333333333333"
)

func ms(v int64) *int64 { return &v }

// TestRuntimeWeightFormula: on v2 a Burstable pod with containers of 1 CPU
// and 100m gets the kubelet's linear weight (43) while runc wrote its own
// conversion for the containers (100 and 17): their split is 5.9 : 1, not
// the 10 : 1 their requests say. The same pod with linear container
// weights is not reported.
func TestRuntimeWeightFormula(t *testing.T) {
	big, small := strings.Repeat("a", 64), strings.Repeat("b", 64)
	meta := metadata.NewSet([]metadata.Pod{{UID: uidA, Name: "app", Namespace: "ns", QoS: "burstable", RequestMilliCPU: ms(1100),
		Containers: []metadata.Container{{Name: "main", ID: big, RequestMilliCPU: ms(1000)}, {Name: "sidecar", ID: small, RequestMilliCPU: ms(100)}}}})
	podW := fairness.SharesToWeightLinear(fairness.MilliCPUToShares(1100))
	tierW := podW
	for _, conv := range []struct {
		name     string
		f        func(uint64) uint64
		reported bool
	}{{"runtime", fairness.SharesToWeightRuntime, true}, {"linear", fairness.SharesToWeightLinear, false}} {
		t.Run(conv.name, func(t *testing.T) {
			pod := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + under(uidA) + ".slice"
			n := v2Node(t, meta,
				cg{path: "/kubepods.slice", weight: 100},
				cg{path: "/kubepods.slice/kubepods-burstable.slice", weight: tierW},
				cg{path: "/kubepods.slice/kubepods-besteffort.slice", weight: 1},
				cg{path: pod, weight: podW},
				cg{path: pod + "/cri-containerd-" + big + ".scope", weight: conv.f(fairness.MilliCPUToShares(1000)), procs: 1},
				cg{path: pod + "/cri-containerd-" + small + ".scope", weight: conv.f(fairness.MilliCPUToShares(100)), procs: 1},
			)
			r := Run(&Input{Node: n, Meta: meta})
			f, ok := find(r, rules.TierDrift, func(f Finding) bool { return f.Subject.PodUID == uidA })
			if ok != conv.reported {
				t.Fatalf("tier-drift for the pod: %v, want %v; findings %v", ok, conv.reported, ruleIDs(r))
			}
			if !ok {
				return
			}
			if !strings.Contains(f.Evidence.Summary, "weight 100 (linear 39)") || !strings.Contains(f.Evidence.Summary, "weight 17 (linear 4)") {
				t.Errorf("evidence does not show both conversions: %s", f.Evidence.Summary)
			}
			if dev, _ := f.Evidence.Get("maxDeviation"); dev.(float64) < 0.3 {
				t.Errorf("deviation %v, want the sidecar's ~55%% more than its request says", dev)
			}
		})
	}
}

// TestTierAndOrphans: a BestEffort tier tuned by hand, a Burstable tier
// whose weight does not match its pods' requests, an orphan pod cgroup with
// processes and an empty leftover.
func TestTierAndOrphans(t *testing.T) {
	meta := metadata.NewSet([]metadata.Pod{{UID: uidA, Name: "web", Namespace: "ns", QoS: "burstable", RequestMilliCPU: ms(500)}})
	bu := "/kubepods.slice/kubepods-burstable.slice"
	n := v2Node(t, meta,
		cg{path: "/kubepods.slice", weight: 100},
		cg{path: bu, weight: 200}, // 500m says linear(512) = 20
		cg{path: "/kubepods.slice/kubepods-besteffort.slice", weight: 50},
		cg{path: bu + "/kubepods-burstable-pod" + under(uidA) + ".slice", weight: fairness.SharesToWeightLinear(512)},
		cg{path: bu + "/kubepods-burstable-pod" + under(uidB) + ".slice", weight: 4},
		cg{path: bu + "/kubepods-burstable-pod" + under(uidB) + ".slice/cri-containerd-" + strings.Repeat("c", 64) + ".scope", weight: 4, procs: 2, used1: 10, used2: 300010},
		cg{path: bu + "/kubepods-burstable-pod" + under(uidC) + ".slice", weight: 4},
	)
	r := Run(&Input{Node: n, Meta: meta})
	want := map[string]Severity{}
	for _, f := range r.Findings {
		switch {
		case f.Rule == rules.TierDrift && strings.HasSuffix(f.Subject.Cgroup, "kubepods-besteffort.slice"):
			want["besteffort tier"] = f.Severity
		case f.Rule == rules.TierDrift && f.Subject.Cgroup == bu:
			if e, _ := f.Evidence.Get("expectedWeight"); e != fairness.SharesToWeightLinear(512) {
				t.Errorf("Burstable tier expected weight %v, want linear(512)", e)
			}
			want["burstable tier"] = f.Severity
		case f.Rule == rules.OrphanCgroup && f.Subject.PodUID == uidB:
			want["orphan"] = f.Severity
		case f.Rule == rules.OrphanCgroup && f.Subject.PodUID == uidC:
			want["leftover"] = f.Severity
		case f.Subject.PodUID == uidA:
			t.Errorf("finding for the healthy pod: %s %s", f.Rule, f.Evidence.Summary)
		}
	}
	for k, sev := range map[string]Severity{"besteffort tier": Warning, "orphan": Warning, "leftover": Info} {
		if want[k] != sev {
			t.Errorf("%s: severity %q, want %q (findings %v)", k, want[k], sev, ruleIDs(r))
		}
	}
	// The Burstable tier is not compared: pods B and C are not in the
	// metadata, so the sum of requests is unknown; the audit says so.
	if _, ok := want["burstable tier"]; ok {
		t.Error("Burstable tier compared although two of its pods have no metadata")
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "Burstable tier not compared") {
		t.Errorf("notes %q do not say why the Burstable tier was not compared", r.Notes)
	}
}

// TestOneSample: without rates the accounting gap cannot be measured and
// the audit says so instead of reporting zeros.
func TestOneSample(t *testing.T) {
	n := v2Node(t, nil, cg{path: "/kubepods.slice", weight: 100})
	n.Root.Walk(func(c *inventory.Cgroup) { c.UsageCores = nil })
	r := Run(&Input{Node: n})
	if !strings.Contains(strings.Join(r.Notes, "\n"), rules.PodAccountingGap+" not checked") {
		t.Errorf("notes %q do not say the accounting gap needs two samples", r.Notes)
	}
}

// TestSortAndFailOn: findings sort by severity, then rule order, then
// subject; AtOrAbove follows the severity order.
func TestSortAndFailOn(t *testing.T) {
	fs := []Finding{
		{Rule: rules.OrphanCgroup, Severity: Info, Subject: Subject{Kind: "pod", PodUID: "b"}},
		{Rule: rules.TierDrift, Severity: Error, Subject: Subject{Kind: "pod", PodUID: "z"}},
		{Rule: rules.BestEffortStarvation, Severity: Error, Subject: Subject{Kind: "pod", PodUID: "y"}},
		{Rule: rules.BestEffortStarvation, Severity: Error, Subject: Subject{Kind: "pod", PodUID: "x"}},
		{Rule: rules.MisplacedContainer, Severity: Warning, Subject: Subject{Kind: "pod", PodUID: "a"}},
	}
	Sort(fs)
	var got []string
	for _, f := range fs {
		got = append(got, f.Rule+"/"+f.Subject.PodUID)
	}
	want := "besteffort-starvation/x besteffort-starvation/y tier-drift/z misplaced-container/a orphan-cgroup/b"
	if strings.Join(got, " ") != want {
		t.Errorf("order %v, want %s", got, want)
	}
	r := &Report{Findings: []Finding{{Severity: Warning}}}
	if r.AtOrAbove(Error) || !r.AtOrAbove(Warning) || !r.AtOrAbove(Info) {
		t.Error("AtOrAbove does not follow error > warning > info")
	}
	if _, err := ParseSeverity("fatal"); err == nil {
		t.Error("ParseSeverity accepted fatal")
	}
}

// A Burstable tier whose pods request no CPU: the kubelet would write the
// minimum weight, and the message says so instead of a percentage of it
// ("1603800% of what their requests promise").
func TestBurstableTierWithoutCPURequests(t *testing.T) {
	meta := metadata.NewSet([]metadata.Pod{{UID: uidA, Name: "cache", Namespace: "ns", QoS: "burstable", RequestMilliCPU: ms(0)}})
	bu := "/kubepods.slice/kubepods-burstable.slice"
	n := v2Node(t, meta,
		cg{path: "/kubepods.slice", weight: 100},
		cg{path: bu, weight: 3000},
		cg{path: "/kubepods.slice/kubepods-besteffort.slice", weight: 1},
		cg{path: bu + "/kubepods-burstable-pod" + under(uidA) + ".slice", weight: 1, procs: 1},
	)
	r := Run(&Input{Node: n, Meta: meta})
	f, ok := find(r, rules.TierDrift, func(f Finding) bool { return f.Subject.Cgroup == bu })
	if !ok {
		t.Fatalf("no tier-drift for the Burstable tier: %v", ruleIDs(r))
	}
	if !strings.Contains(f.Message, "No Burstable pod requests CPU") || !strings.Contains(f.Message, "the tier weighs 3000") || strings.Contains(f.Message, "%") {
		t.Errorf("message %q", f.Message)
	}
}

// Findings speak to the person paged about their node, not about this
// project's test cases.
func TestMessagesDoNotSpeakOfSeeds(t *testing.T) {
	for _, name := range []string{"seed-000-eks-neonvm", "seed-003-k3s-spin", "cgroupfs-v1-containerd", "cgroupfs-v2-crio"} {
		in := loadExample(t, name, "", "")
		for _, f := range Run(in).Findings {
			for _, text := range []string{f.Message, f.Remedy, f.Evidence.Summary, f.Brief} {
				if strings.Contains(strings.ToLower(text), "seed") {
					t.Errorf("%s %s: %q", name, f.Rule, text)
				}
			}
		}
	}
}
