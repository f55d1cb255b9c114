package plan

import (
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// weightsExample scans an embedded example snapshot with its pods file
// and, unless vms is empty, its VMs file.
func weightsExample(t *testing.T, name, pods, vms string) (*inventory.Node, mounts.Places, *metadata.Set) {
	t.Helper()
	ps, err := metadata.ReadPodsFile("../examples/snapshots/" + pods)
	meta := metadata.NewSet(ps)
	if err == nil && vms != "" {
		var v []metadata.VM
		v, err = metadata.ReadVMsFile("../examples/snapshots/" + vms)
		meta.ApplyVMs(v)
	}
	if err != nil {
		t.Fatal(err)
	}
	n, sc := scanExample(t, name, meta)
	return n, sc.Places, meta
}

func byRole(p *Plan) map[Role][]Target {
	out := map[Role][]Target{}
	for _, t := range p.Targets {
		out[t.Role] = append(out[t.Role], t)
	}
	return out
}

// Seed 000 (EKS, NeonVM, v1 systemd, 48 CPUs): three VM runner pods of 4,
// 1 and 0.25 CPUs at 2 shares, one unsized BestEffort pod.
func TestSeed000Targets(t *testing.T) {
	n, pl, meta := weightsExample(t, "seed-000-eks-neonvm", "seed-000-eks-neonvm.pods.json", "seed-000-eks-neonvm.vms.json")
	p, err := Targets(WeightInput{Node: n, Places: pl, Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	r := byRole(p)
	if len(r[RolePod]) != 3 || len(r[RoleContainer]) != 3 || len(r[RoleTier]) != 1 {
		t.Fatalf("targets by role: %d pods, %d containers, %d tiers; want 3, 3, 1: %+v", len(r[RolePod]), len(r[RoleContainer]), len(r[RoleTier]), p.Targets)
	}
	var sum uint64
	for _, pt := range r[RolePod] {
		want := fairness.MilliCPUToShares(pt.MilliCPU)
		if pt.Value != want {
			t.Errorf("pod %s: %d shares for %dm, want %d", pt.Pod, pt.Value, pt.MilliCPU, want)
		}
		sum += want
		if !strings.HasSuffix(pt.Path, "/cpu.shares") || !strings.Contains(pt.Path, pt.Cgroup) {
			t.Errorf("pod target path %s does not name %s's cpu.shares", pt.Path, pt.Cgroup)
		}
		ok := false
		for _, ct := range r[RoleContainer] {
			if ct.Pod == pt.Pod {
				ok = ct.Value == pt.Value && strings.HasPrefix(ct.Cgroup, pt.Cgroup+"/")
			}
		}
		if !ok {
			t.Errorf("pod %s: no VM container target inside it at its weight", pt.Pod)
		}
	}
	if tier := r[RoleTier][0]; tier.Value != 2+sum || !strings.HasSuffix(tier.Cgroup, "kubepods-besteffort.slice") {
		t.Errorf("tier target %s = %d, want 2 + %d", tier.Cgroup, tier.Value, sum)
	}
	if !strings.Contains(strings.Join(p.Notes, "\n"), "1 BestEffort pod without a declared size keeps the minimum") {
		t.Errorf("no note of the unsized pod: %q", p.Notes)
	}

	// Only the tier, only the pods, one pod.
	p, _ = Targets(WeightInput{Node: n, Places: pl, Meta: meta, Only: []string{rules.BestEffortStarvation}})
	if r := byRole(p); len(r[RoleTier]) != 1 || len(p.Targets) != 1 {
		t.Errorf("tier only: %+v", p.Targets)
	}
	p, _ = Targets(WeightInput{Node: n, Places: pl, Meta: meta, Pod: r[RolePod][0].Pod, Only: []string{rules.SizeBlindWeights}})
	if len(p.Targets) != 2 {
		t.Errorf("one pod: %d targets, want its pod and container: %+v", len(p.Targets), p.Targets)
	}
	if _, err := Targets(WeightInput{Node: n, Places: pl, Meta: meta, Pod: "nope", Only: []string{rules.SizeBlindWeights}}); err == nil {
		t.Error("--pod nope was accepted")
	}

	// A cap below the sizes: the tier weighs what the cap would request.
	p, _ = Targets(WeightInput{Node: n, Places: pl, Meta: meta, MaxTierMilliCPU: 2000, Only: []string{rules.BestEffortStarvation}})
	if v := p.Targets[0].Value; v != 2+fairness.MilliCPUToShares(2000) {
		t.Errorf("capped tier %d, want %d", v, 2+fairness.MilliCPUToShares(2000))
	}
	if !strings.Contains(strings.Join(p.Notes, "\n"), "more than the cap") {
		t.Errorf("no note of the cap: %q", p.Notes)
	}
}

// Sizes beyond the kernel's range are clamped, with a note; sizes that are
// not sizes and sizes on pods with requests are skipped, with the reason.
func TestTargetsAtTheExtremes(t *testing.T) {
	n, pl, meta := weightsExample(t, "seed-000-eks-neonvm", "seed-000-eks-neonvm.pods.json", "")
	var be []*inventory.Pod
	for _, p := range n.Pods {
		if p.QoS == "besteffort" && p.Cgroup != nil {
			be = append(be, p)
		}
	}
	if len(be) < 3 {
		t.Fatalf("%d BestEffort pods, want 3 or more", len(be))
	}
	meta.SetSize(be[0].UID, metadata.Size{MilliCPU: 300_000, Source: "annotation"}) // 300 CPUs: above 262144 shares
	meta.SetSize(be[1].UID, metadata.Size{MilliCPU: 9_000_000, Source: "annotation"})
	meta.SetSize(be[2].UID, metadata.Size{MilliCPU: 0, Source: "annotation"})
	p, err := Targets(WeightInput{Node: n, Places: pl, Meta: meta, MaxTierMilliCPU: 8_000_000})
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(p.Notes, "\n")
	for _, want := range []string{"weighs more than the kernel's maximum", "above the kernel's maximum; clamped to 262144"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q lack %q", notes, want)
		}
	}
	skipped := map[string]string{}
	for _, s := range p.Skipped {
		skipped[s.Pod] = s.Reason
	}
	if !strings.Contains(skipped[be[1].UID], "no node has") || !strings.Contains(skipped[be[2].UID], "above 0") {
		t.Errorf("skips %v", skipped)
	}
	for _, tg := range p.Targets {
		if tg.Value < fairness.MinShares || tg.Value > fairness.MaxShares {
			t.Errorf("target %s = %d outside the kernel's range", tg.Cgroup, tg.Value)
		}
	}
}

// On v2 the pod and tier targets are the kubelet's linear conversion.
func TestTargetsV2(t *testing.T) {
	n, pl, meta := weightsExample(t, "cgroupfs-v2-crio", "cgroupfs-v2-crio.pods.json", "")
	uid := "f37bbcbd-1d63-486c-a0ec-6f767fa8cbc7" // the example's BestEffort pod
	meta.SetSize(uid, metadata.Size{MilliCPU: 2000, Source: "annotation"})
	p, err := Targets(WeightInput{Node: n, Places: pl, Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	r := byRole(p)
	if len(r[RolePod]) != 1 || len(r[RoleTier]) != 1 {
		t.Fatalf("targets %+v", p.Targets)
	}
	if w := r[RolePod][0].Value; w != fairness.SharesToWeightLinear(2048) || !strings.HasSuffix(r[RolePod][0].Path, "/cpu.weight") {
		t.Errorf("v2 pod target %d at %s, want %d in cpu.weight", w, r[RolePod][0].Path, fairness.SharesToWeightLinear(2048))
	}
	if w := r[RoleTier][0].Value; w != fairness.SharesToWeightLinear(2+2048) {
		t.Errorf("v2 tier target %d, want %d", w, fairness.SharesToWeightLinear(2+2048))
	}
}

// The last sized pod gone, a tier cgwarden raised goes back to the
// kubelet's minimum (v1 2 shares, v2 weight 1); a tier at the minimum, or
// of unknown weight, gets no target.
func TestTierWithoutSizedPodsGoesBackToTheMinimum(t *testing.T) {
	for _, c := range []struct {
		example, pods string
		minimum       uint64
	}{
		{"seed-000-eks-neonvm", "seed-000-eks-neonvm.pods.json", fairness.MinShares},
		{"cgroupfs-v2-crio", "cgroupfs-v2-crio.pods.json", fairness.SharesToWeightLinear(fairness.MinShares)},
	} {
		t.Run(c.example, func(t *testing.T) {
			n, pl, _ := weightsExample(t, c.example, c.pods, "")
			// Metadata of no pod: none declares a size.
			meta := metadata.NewSet(nil)
			var tier *inventory.Cgroup
			for _, ch := range n.KubeRoot.Children {
				if ch.Identity.QoS == "besteffort" {
					tier = ch
				}
			}
			if tier == nil || tier.Stats.CPU.Weight == nil {
				t.Fatalf("no BestEffort tier of known weight in %s", c.example)
			}
			if *tier.Stats.CPU.Weight != c.minimum {
				t.Fatalf("the example's tier weighs %d, want the kubelet's %d", *tier.Stats.CPU.Weight, c.minimum)
			}
			p, err := Targets(WeightInput{Node: n, Places: pl, Meta: meta})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Targets) != 0 {
				t.Errorf("no sized pod, tier at the minimum: targets %+v, want none", p.Targets)
			}

			// As cgwarden left it for pods since deleted.
			raised := c.minimum + 4096
			tier.Stats.CPU.Weight = &raised
			p, err = Targets(WeightInput{Node: n, Places: pl, Meta: meta})
			if err != nil {
				t.Fatal(err)
			}
			r := byRole(p)
			if len(p.Targets) != 1 || len(r[RoleTier]) != 1 {
				t.Fatalf("a raised tier and no sized pod: targets %+v, want the tier's alone", p.Targets)
			}
			if tg := r[RoleTier][0]; tg.Value != c.minimum || tg.Cgroup != tier.Path || !strings.Contains(tg.Description, "no sized pod left") {
				t.Errorf("tier target %+v, want %s at %d", tg, tier.Path, c.minimum)
			}
			// Only the pods' rule: the tier is not its business.
			if p, _ := Targets(WeightInput{Node: n, Places: pl, Meta: meta, Only: []string{rules.SizeBlindWeights}}); len(p.Targets) != 0 {
				t.Errorf("pods only: targets %+v, want none", p.Targets)
			}

			tier.Stats.CPU.Weight = nil
			if p, _ := Targets(WeightInput{Node: n, Places: pl, Meta: meta}); len(p.Targets) != 0 {
				t.Errorf("a tier of unknown weight: targets %+v, want none", p.Targets)
			}
		})
	}
}

// A sized BestEffort pod whose cgroup still has the kernel's default
// weight (the kubelet made it and has not written its minimum yet) gets
// no target until it has: a write in between would journal the kernel's
// default as what was there, and revert would restore it. Its tier still
// counts its size. At the kubelet's minimum, it gets its target.
func TestPodNotSetUpByTheKubelet(t *testing.T) {
	for _, c := range []struct {
		example, pods, uid string
		def, minimum       uint64
	}{
		{"cgroupfs-v2-crio", "cgroupfs-v2-crio.pods.json", "f37bbcbd-1d63-486c-a0ec-6f767fa8cbc7", fairness.DefaultWeight, fairness.SharesToWeightLinear(fairness.MinShares)},
	} {
		n, pl, meta := weightsExample(t, c.example, c.pods, "")
		meta.SetSize(c.uid, metadata.Size{MilliCPU: 2000, Source: "annotation"})
		var pod *inventory.Cgroup
		for _, p := range n.Pods {
			if p.UID == c.uid {
				pod = p.Cgroup
			}
		}
		if pod == nil {
			t.Fatalf("%s: no pod %s", c.example, c.uid)
		}
		fresh := c.def
		pod.Stats.CPU.Weight = &fresh
		p, err := Targets(WeightInput{Node: n, Places: pl, Meta: meta})
		if err != nil {
			t.Fatal(err)
		}
		r := byRole(p)
		if len(r[RolePod]) != 0 || len(r[RoleTier]) != 1 {
			t.Errorf("%s: a pod cgroup at the kernel's default %d: targets %+v, want the tier's alone", c.example, c.def, p.Targets)
		}
		if len(p.Skipped) != 1 || !strings.Contains(p.Skipped[0].Reason, "has not set it up yet") {
			t.Errorf("%s: skipped %+v, want the pod, not set up yet", c.example, p.Skipped)
		}
		set := c.minimum
		pod.Stats.CPU.Weight = &set
		p, err = Targets(WeightInput{Node: n, Places: pl, Meta: meta})
		if err != nil {
			t.Fatal(err)
		}
		if r := byRole(p); len(r[RolePod]) != 1 {
			t.Errorf("%s: a pod cgroup at the kubelet's minimum: targets %+v, want the pod's", c.example, p.Targets)
		}
	}
}

// The same on v1 (seed 000, NeonVM runners at 2 shares): a runner pod's
// cgroup at the kernel's 1024 gets no target, nor its VM container; a VM
// container at 1024 inside a pod the kubelet has set up gets none either,
// while its pod does.
func TestVMNotSetUpV1(t *testing.T) {
	n, pl, meta := weightsExample(t, "seed-000-eks-neonvm", "seed-000-eks-neonvm.pods.json", "seed-000-eks-neonvm.vms.json")
	p, err := Targets(WeightInput{Node: n, Places: pl, Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	r := byRole(p)
	if len(r[RolePod]) == 0 || len(r[RoleContainer]) == 0 {
		t.Fatalf("targets %+v", p.Targets)
	}
	// A runner whose target is not the kernel's default (the 1-CPU VM's
	// is 1024: at it, it needs no write, whoever made it so).
	var pt Target
	for _, tg := range r[RolePod] {
		if tg.Value != fairness.DefaultShares {
			pt = tg
		}
	}
	podPath, ctrPath := pt.Cgroup, ""
	for _, ct := range r[RoleContainer] {
		if ct.Pod == pt.Pod {
			ctrPath = ct.Cgroup
		}
	}
	if podPath == "" || ctrPath == "" {
		t.Fatalf("no runner with a target other than 1024 and its VM container: %+v", p.Targets)
	}
	cg := map[string]*inventory.Cgroup{}
	n.Root.Walk(func(c *inventory.Cgroup) { cg[c.Path] = c })
	fresh, two := uint64(fairness.DefaultShares), uint64(fairness.MinShares)
	for _, c := range []struct {
		what           string
		pod, ctr       *uint64
		wantPod, wantC bool
	}{
		{"pod cgroup at 1024", &fresh, &two, false, false},
		{"VM container at 1024", &two, &fresh, true, false},
		{"both set up", &two, &two, true, true},
	} {
		cg[podPath].Stats.CPU.Weight, cg[ctrPath].Stats.CPU.Weight = c.pod, c.ctr
		p, err := Targets(WeightInput{Node: n, Places: pl, Meta: meta})
		if err != nil {
			t.Fatal(err)
		}
		gotPod, gotC := false, false
		for _, tg := range p.Targets {
			gotPod = gotPod || tg.Cgroup == podPath
			gotC = gotC || tg.Cgroup == ctrPath
		}
		if gotPod != c.wantPod || gotC != c.wantC {
			t.Errorf("%s: pod target %v, container target %v; want %v, %v (skipped %+v)", c.what, gotPod, gotC, c.wantPod, c.wantC, p.Skipped)
		}
	}
}
