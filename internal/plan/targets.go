package plan

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strconv"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// Targets computes what the kubelet would write if every sized
// BestEffort pod requested its declared size (metadata.DeclaredSize): the
// pod cgroup and its VM container get MilliCPUToShares(size) (on v2 the
// kubelet's linear conversion for the pod, the node's own conversion for
// the container), and the BestEffort tier gets 2 + the sum of its sized
// pods' shares — as the kubelet weighs the Burstable tier by the sum of its
// pods' requests. A tier with no sized pod left goes back to the kubelet's
// minimum when it weighs anything else. Pods without a size keep the
// kubelet's minimum; pods with requests are never targets.
//
// The plan it returns has the targets, notes and skipped pods and no
// operation: Targets reads no file (in.FS and in.Units are Weights').
func Targets(in WeightInput) (*Plan, error) {
	if err := CheckOnly(in.Only); err != nil {
		return nil, err
	}
	n := in.Node
	p := &Plan{Version: string(n.Version), Driver: string(n.Driver), Ops: []Op{}}
	wantPods := len(in.Only) == 0 || slices.Contains(in.Only, rules.SizeBlindWeights)
	wantTier := len(in.Only) == 0 || slices.Contains(in.Only, rules.BestEffortStarvation)
	switch {
	case !wantPods && !wantTier:
		return p, nil
	case n.KubeRoot == nil:
		p.Notes = append(p.Notes, "no kubepods hierarchy found: no weights to set")
		return p, nil
	case in.Meta == nil:
		p.Notes = append(p.Notes, "pod sizes unknown: weights need pod metadata (--pods, --metadata) and, for VM pods, --vms")
		return p, nil
	}
	selected, err := MatchPod(n, in.Pod)
	if err != nil {
		return nil, err
	}
	w := &weigher{p: p, meta: in.Meta, v2: in.Places.V2, file: fairness.WeightFile(in.Places.V2), point: in.Places.CPU}
	if w.v2 {
		w.point = in.Places.Unified
	}
	var formulaNote string
	w.ctrWeight, formulaNote = containerConversion(n, in.Meta, w.v2)
	for _, pod := range n.Pods {
		w.pod(pod, wantPods && slices.Contains(selected, pod))
	}
	if formulaNote != "" && slices.ContainsFunc(p.Targets, func(t Target) bool { return t.Role == RoleContainer }) {
		p.Notes = appendOnce(p.Notes, formulaNote)
	}
	limit := in.MaxTierMilliCPU
	if limit <= 0 {
		limit = int64(n.CPUs) * 1000
	}
	// A BestEffort tier with no pod in it is not met above: it is found
	// among the kubelet's QoS tiers.
	for _, c := range n.KubeRoot.Children {
		if bestEffortTier(c) {
			w.tierOf(c)
		}
	}
	for _, t := range w.tiers {
		w.tier(t, wantTier, limit)
	}
	return p, nil
}

// weigher is Targets' state: the plan it fills and how a node's weights
// are written.
type weigher struct {
	p    *Plan
	meta *metadata.Set
	v2   bool
	// file is the weight file's name, point the hierarchy's mount point
	// (empty: unknown, and so are the targets' host paths).
	file, point string
	ctrWeight   func(uint64) uint64
	tiers       []*tierSum
}

// tierSum is what a BestEffort tier's pods add up to.
type tierSum struct {
	tier          *inventory.Cgroup
	milli         int64
	shares        uint64
	sized, others int
}

func (w *weigher) tierOf(c *inventory.Cgroup) *tierSum {
	for _, t := range w.tiers {
		if t.tier == c {
			return t
		}
	}
	t := &tierSum{tier: c}
	w.tiers = append(w.tiers, t)
	return t
}

func bestEffortTier(c *inventory.Cgroup) bool {
	return c != nil && c.Identity.Kind == layout.QoSTier && c.Identity.QoS == layout.BestEffort
}

// add appends t as the target of cgroup c, with its host path and rule.
func (w *weigher) add(c *inventory.Cgroup, t Target) {
	t.Cgroup, t.Rule = c.Path, rules.SizeBlindWeights
	if t.Role == RoleTier {
		t.Rule = rules.BestEffortStarvation
	}
	if w.point != "" {
		t.Path = path.Join(w.point, c.Path, w.file)
	}
	w.p.Targets = append(w.p.Targets, t)
}

func (w *weigher) note(s string) { w.p.Notes = appendOnce(w.p.Notes, s) }

// pod counts p in its BestEffort tier and, when want, targets its cgroup
// and its VM container at its declared size.
func (w *weigher) pod(p *inventory.Pod, want bool) {
	skip := func(why string) { w.p.Skipped = append(w.p.Skipped, Skip{Pod: p.UID, Reason: why}) }
	sz, sized, err := w.meta.DeclaredSize(p.UID)
	c := p.Cgroup
	if c == nil || !bestEffortTier(c.Parent) {
		if sized && p.QoS != layout.BestEffort {
			skip(fmt.Sprintf("declares %s (%s) but is %s: the kubelet weighs it from its requests", milliText(sz.MilliCPU), sz.Source, cmp.Or(p.QoS, "not BestEffort")))
		}
		return
	}
	t := w.tierOf(c.Parent)
	if err != nil {
		skip(err.Error() + ": left at the kubelet's weight")
		t.others++
		return
	}
	if !sized {
		t.others++
		return
	}
	shares := fairness.MilliCPUToShares(sz.MilliCPU)
	if sz.MilliCPU*fairness.DefaultShares/1000 > fairness.MaxShares {
		w.note(fmt.Sprintf("pod %s: its size %s weighs more than the kernel's maximum; held at %d shares", p.Label(), milliText(sz.MilliCPU), fairness.MaxShares))
	}
	t.sized++
	t.milli += sz.MilliCPU
	t.shares += shares
	if !want {
		return
	}
	podWeight := fairness.PodWeight(w.v2, shares)
	if w.notSetUp(c, podWeight) {
		// The kubelet makes a pod's cgroup, then writes its weight: in
		// between it has the kernel's default. A weight written then
		// would journal the kernel's default as what was there, and
		// revert would restore it instead of the kubelet's (the lane's
		// fault suite caught it: a sized pod made while the agent held
		// weights weighed 1024 after revert --all, not 2).
		skip(fmt.Sprintf("its cgroup %s still has the kernel's default weight: the kubelet has not set it up yet; weighed at the next plan", c.Path))
		return
	}
	why := fmt.Sprintf("what the kubelet would write if the pod requested its %s size (%s)", sizeAdj(sz.MilliCPU), sz.Source)
	w.add(c, Target{Value: podWeight, Role: RolePod, Pod: p.UID, MilliCPU: sz.MilliCPU,
		Description: fmt.Sprintf("pod %s (cgroup %s): %s", p.Label(), c.Path, why)})
	vc, why2 := vmContainer(p, w.meta, sz.Source)
	switch {
	case vc == nil:
		w.note(fmt.Sprintf("pod %s: %s; only the pod cgroup is weighted", p.Label(), why2))
	case vc.Misplaced:
		skip(fmt.Sprintf("its VM container %s lives outside the pod (%s): adopt it first (misplaced-container), then its weight is set", layout.ShortID(vc.ID), vc.Cgroup.Path))
	case w.notSetUp(vc.Cgroup, w.ctrWeight(shares)):
		// The runtime's window, as the kubelet's above.
		skip(fmt.Sprintf("its VM container's cgroup %s still has the kernel's default weight: the runtime has not set it up yet; weighed at the next plan", vc.Cgroup.Path))
	default:
		w.add(vc.Cgroup, Target{Value: w.ctrWeight(shares), Role: RoleContainer, Pod: p.UID, Container: vc.ID, MilliCPU: sz.MilliCPU,
			Description: fmt.Sprintf("VM container %s of pod %s: %s", layout.ShortID(vc.ID), p.Label(), why)})
	}
}

// notSetUp reports whether cgroup c, of a BestEffort pod (whose weight
// the kubelet and the runtime set to the minimum, never to the kernel's
// default), still has the weight the kernel gives a new cgroup, and the
// target is another: it was made and not yet written. A cgroup that
// already has the target needs no write, whatever made it so.
func (w *weigher) notSetUp(c *inventory.Cgroup, target uint64) bool {
	def := uint64(fairness.DefaultShares)
	if w.v2 {
		def = fairness.DefaultWeight
	}
	cur := c.Stats.CPU.Weight
	return cur != nil && *cur == def && target != def
}

// tier notes what a BestEffort tier's pods add up to and, when want,
// targets its weight: 2 + its sized pods' shares, capped at what limit
// would request; the kubelet's minimum when it has no sized pod left.
func (w *weigher) tier(t *tierSum, want bool, limit int64) {
	minimum := fairness.PodWeight(w.v2, fairness.MinShares)
	if t.sized == 0 {
		// No sized pod left (the last one deleted, or its size
		// withdrawn): the tier goes back to the kubelet's minimum,
		// which is what the kubelet writes for it. Planned only
		// when it weighs something else (cgwarden raised it for pods
		// that are gone), so that a node without sized pods gets no
		// target; an unknown weight is left alone.
		if cur := t.tier.Stats.CPU.Weight; want && cur != nil && *cur != minimum {
			w.add(t.tier, Target{Value: minimum, Role: RoleTier,
				Description: fmt.Sprintf("BestEffort tier %s: no sized pod left, back to the kubelet's minimum (it weighs %d)", t.tier.Path, *cur)})
		}
		return
	}
	if t.others > 0 {
		verb := "keep"
		if t.others == 1 {
			verb = "keeps"
		}
		w.note(fmt.Sprintf("%s: %s without a declared size %s the minimum weight, and so a sliver of the tier", t.tier.Path, plural(t.others, "BestEffort pod"), verb))
	}
	if !want {
		return
	}
	shares := t.shares
	counted := t.milli
	if limit > 0 && t.milli > limit {
		// The sized pods together declare more than the cap: the tier
		// weighs what the cap would request, and its pods keep their
		// proportions inside it.
		shares = fairness.MilliCPUToShares(limit)
		counted = limit
		w.note(fmt.Sprintf("%s: its sized pods declare %s together, more than the cap of %s (--max-tier-cpu, default the node's CPUs): the tier weighs what %s would request",
			t.tier.Path, milliText(t.milli), milliText(limit), milliText(limit)))
	}
	total := fairness.MinShares + shares
	if total > fairness.MaxShares {
		w.note(fmt.Sprintf("%s: %d shares is above the kernel's maximum; clamped to %d", t.tier.Path, total, fairness.MaxShares))
		total = fairness.MaxShares
	}
	w.add(t.tier, Target{Value: fairness.PodWeight(w.v2, total), Role: RoleTier, MilliCPU: counted,
		Description: fmt.Sprintf("BestEffort tier %s: 2 + the shares of its %s (%s), as the kubelet weighs the Burstable tier by its pods' requests",
			t.tier.Path, plural(t.sized, "sized pod"), milliText(counted))})
}

// containerConversion is how the node converts a container's shares to
// cpu.weight on v2: the runtime's formula (runc ≥ 1.3.2, crun ≥ 1.23) or
// the kubelet's linear one (older runtimes). It is read off the node's own
// containers that request CPU; unknown, the linear one is used and the
// returned note says so. On v1 shares are shares.
func containerConversion(n *inventory.Node, meta *metadata.Set, v2 bool) (func(uint64) uint64, string) {
	if !v2 {
		return func(s uint64) uint64 { return s }, ""
	}
	runtime, linear := 0, 0
	for _, p := range n.Pods {
		mp, ok := meta.Pod(p.UID)
		if !ok {
			continue
		}
		for _, c := range p.Containers {
			if c.Misplaced || c.Sandbox || c.Cgroup.Stats.CPU.Weight == nil {
				continue
			}
			for _, mc := range mp.Containers {
				if mc.ID != c.ID || mc.RequestMilliCPU == nil || *mc.RequestMilliCPU <= 0 {
					continue
				}
				s := fairness.MilliCPUToShares(*mc.RequestMilliCPU)
				w := *c.Cgroup.Stats.CPU.Weight
				lin, rt := fairness.SharesToWeightLinear(s), fairness.SharesToWeightRuntime(s)
				switch {
				case w == rt && rt != lin:
					runtime++
				case w == lin && rt != lin:
					linear++
				}
			}
		}
	}
	if runtime > linear {
		return fairness.SharesToWeightRuntime, ""
	}
	if linear > 0 {
		return fairness.SharesToWeightLinear, ""
	}
	return fairness.SharesToWeightLinear, "which shares→weight conversion this node's runtime uses for containers is unknown (no container with a CPU request tells): the VM containers get the kubelet's linear one, as their pods do"
}

// vmContainer picks the running container of a sized pod whose cgroup is
// weighted with the pod, by the size policy (vmsize.Container: the
// container the sizer sizes). Nil, with the reason, when none can be told.
func vmContainer(p *inventory.Pod, meta *metadata.Set, source string) (*inventory.Container, string) {
	mp, _ := meta.Pod(p.UID)
	var app []*inventory.Container
	var names []string
	for _, c := range p.Containers {
		if c.Sandbox || c.Leftover {
			continue
		}
		name := c.Name
		if name == "" && mp != nil {
			name = mp.ContainerName(c.ID)
		}
		app, names = append(app, c), append(names, name)
	}
	var ann map[string]string
	if mp != nil {
		ann = mp.Annotation
	}
	i, err := vmsize.Container(names, source, ann)
	if err != nil {
		if len(app) == 0 {
			return nil, "no container cgroup found"
		}
		return nil, "of the running containers: " + err.Error()
	}
	return app[i], ""
}

// milliText writes a CPU size for people: "4 CPUs", "250m CPU".
func milliText(m int64) string {
	if m%1000 == 0 {
		return plural(int(m/1000), "CPU")
	}
	return strconv.FormatFloat(float64(m)/1000, 'f', -1, 64) + " CPUs"
}

// sizeAdj writes a size as an adjective: "4-CPU", "0.25-CPU".
func sizeAdj(m int64) string {
	return strconv.FormatFloat(float64(m)/1000, 'f', -1, 64) + "-CPU"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
