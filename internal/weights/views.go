package weights

import (
	"slices"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// View is a sized BestEffort pod as it stands and as its targets would
// leave it: what `inspect` and `audit` show.
type View struct {
	Pod      *inventory.Pod
	MilliCPU int64
	Source   string
	// Weight and TierWeight are the current raw weights (nil: unknown);
	// Target and TierTarget what the weight plan holds them at.
	Weight, TierWeight *uint64
	Target, TierTarget uint64
	// Guaranteed is the pod's CPU under full contention now; AtTarget
	// under the targets of every sized pod and the tier; AtKubelet at the
	// kubelet's minimum weights (without cgwarden).
	Guaranteed, AtTarget, AtKubelet float64
}

// Views returns every sized BestEffort pod of the node with its targets
// (tier cap: the node's CPUs, unless maxTierMilli says otherwise), and
// whether every target is in place already: the weights are held (by
// `cgwarden serve --fix`, or a fix the kubelet has not reset yet).
func Views(n *inventory.Node, meta *metadata.Set, maxTierMilli int64) (views []View, held bool) {
	in := Input{Node: n, Places: mounts.Places{V2: n.Version == mounts.V2}, Meta: meta, Pods: true, Tier: true, MaxTierMilliCPU: maxTierMilli}
	wp, err := Targets(in)
	if err != nil || !slices.ContainsFunc(wp.Targets, func(t Target) bool { return t.Role == RolePod }) {
		// No sized pod (a tier going back to the minimum is not one).
		return nil, false
	}
	// A tier held at its uncapped target (a fix given a larger
	// --max-tier-cpu) is held too: show what it holds.
	in.MaxTierMilliCPU = vmsize.MaxMilliCPU
	if all, err := Targets(in); err == nil && tierAt(n, all) && !tierAt(n, wp) {
		wp = all
	}
	override := map[string]uint64{}
	var tier Target
	held = true
	for _, t := range wp.Targets {
		override[t.Cgroup] = t.Value
		if t.Role == RoleTier {
			tier = t
		}
		if c := n.Find(t.Cgroup); c == nil || c.Stats.CPU.Weight == nil || *c.Stats.CPU.Weight != t.Value {
			held = false
		}
	}
	var paths []string
	for _, t := range wp.Targets {
		if t.Role == RolePod {
			paths = append(paths, t.Cgroup)
		}
	}
	at := n.GuaranteedWith(override, paths...)
	minimum := uint64(fairness.MinShares)
	if n.Version == mounts.V2 {
		minimum = fairness.SharesToWeightLinear(fairness.MinShares)
	}
	bare := map[string]uint64{}
	for c := range override {
		bare[c] = minimum
	}
	atKubelet := n.GuaranteedWith(bare, paths...)
	for _, t := range wp.Targets {
		if t.Role != RolePod {
			continue
		}
		p := n.Pod(t.Pod)
		if p == nil || p.Cgroup == nil {
			continue
		}
		sz, _, _ := meta.DeclaredSize(t.Pod)
		v := View{Pod: p, MilliCPU: t.MilliCPU, Source: sz.Source, Weight: p.Cgroup.Stats.CPU.Weight, Target: t.Value,
			TierTarget: tier.Value, Guaranteed: p.Cgroup.GuaranteedCores, AtTarget: at[t.Cgroup], AtKubelet: atKubelet[t.Cgroup]}
		if p.Cgroup.Parent != nil {
			v.TierWeight = p.Cgroup.Parent.Stats.CPU.Weight
		}
		views = append(views, v)
	}
	return views, held
}

// tierAt reports whether the tier of a plan holds its target now.
func tierAt(n *inventory.Node, p *Plan) bool {
	for _, t := range p.Targets {
		if t.Role == RoleTier {
			c := n.Find(t.Cgroup)
			return c != nil && c.Stats.CPU.Weight != nil && *c.Stats.CPU.Weight == t.Value
		}
	}
	return false
}
