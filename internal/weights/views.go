package weights

import (
	"slices"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/plan"
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
	in := plan.WeightInput{Node: n, Places: mounts.Places{V2: n.Version == mounts.V2}, Meta: meta, MaxTierMilliCPU: maxTierMilli}
	wp, err := plan.Targets(in)
	if err != nil || !slices.ContainsFunc(wp.Targets, func(t plan.Target) bool { return t.Role == plan.RolePod }) {
		// No sized pod (a tier going back to the minimum is not one).
		return nil, false
	}
	// A tier held at its uncapped target (a fix given a larger
	// --max-tier-cpu) is held too: show what it holds.
	in.MaxTierMilliCPU = vmsize.MaxMilliCPU
	if all, err := plan.Targets(in); err == nil && tierAt(n, all) && !tierAt(n, wp) {
		wp = all
	}
	// The targets, and the kubelet's minimum in their place.
	override, bare := map[string]uint64{}, map[string]uint64{}
	minimum := fairness.PodWeight(n.Version == mounts.V2, fairness.MinShares)
	var tier plan.Target
	var paths []string
	held = true
	for _, t := range wp.Targets {
		override[t.Cgroup], bare[t.Cgroup] = t.Value, minimum
		switch t.Role {
		case plan.RoleTier:
			tier = t
		case plan.RolePod:
			paths = append(paths, t.Cgroup)
		}
		if c := n.Find(t.Cgroup); c == nil || c.Stats.CPU.Weight == nil || *c.Stats.CPU.Weight != t.Value {
			held = false
		}
	}
	at, atKubelet := n.GuaranteedWith(override, paths...), n.GuaranteedWith(bare, paths...)
	for _, t := range wp.Targets {
		if t.Role != plan.RolePod {
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
func tierAt(n *inventory.Node, p *plan.Plan) bool {
	for _, t := range p.Targets {
		if t.Role == plan.RoleTier {
			c := n.Find(t.Cgroup)
			return c != nil && c.Stats.CPU.Weight != nil && *c.Stats.CPU.Weight == t.Value
		}
	}
	return false
}
