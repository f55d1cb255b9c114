package audit

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// proportionalTolerance is how far a pod's share by weight may stray from
// its share by size before the weights are called size-blind.
const proportionalTolerance = 0.10

type sizedPod struct {
	pod    *inventory.Pod
	milli  int64
	source string
	weight uint64
}

// checkSizeBlind compares, among the pods of one parent cgroup (a QoS tier
// or the kubelet root), each pod's share of the siblings' weights with its
// share of their sizes (fairSize). Under contention the scheduler splits
// the parent's CPU by weight, so a pod whose weight share is below its size
// share gets less than its size says. One finding per parent; an error
// when some pod gets less than half of what its size says. A size's share
// is taken through the kubelet's conversion (kubeletWeight): what a pod
// would weigh if its requests were its size. Pods that weigh exactly that
// are not size-blind even where the weight file's integer steps make the
// ratio uneven (v2: 10m, 100m and 1000m weigh 1, 4 and 39).
func checkSizeBlind(in *Input, r *Report) {
	if in.Meta == nil {
		r.note("%s not checked: pod sizes unknown (give --pods, and --vms for VM pods)", rules.SizeBlindWeights)
		return
	}
	groups := map[*inventory.Cgroup][]sizedPod{}
	var parents []*inventory.Cgroup
	unsized := map[*inventory.Cgroup]int{}
	for _, p := range in.Node.Pods {
		c := p.Cgroup
		if c == nil || c.Parent == nil {
			continue
		}
		w, ok := weightOf(c)
		sz, sized := fairSize(in.Meta, p.UID)
		if !ok || !sized {
			unsized[c.Parent]++
			continue
		}
		if _, seen := groups[c.Parent]; !seen {
			parents = append(parents, c.Parent)
		}
		groups[c.Parent] = append(groups[c.Parent], sizedPod{p, sz.MilliCPU, sz.Source, w})
	}
	for _, parent := range parents {
		g := groups[parent]
		if len(g) < 2 {
			continue
		}
		var sumSize, sumW float64
		for _, s := range g {
			sumSize += float64(kubeletWeight(in.Node, s.milli))
			sumW += float64(s.weight)
		}
		lo, hi := math.Inf(1), 0.0
		var off []sizedPod
		var rows []map[string]any
		for _, s := range g {
			sizeShare := float64(kubeletWeight(in.Node, s.milli)) / sumSize
			weightShare := float64(s.weight) / sumW
			ratio := weightShare / sizeShare
			lo, hi = min(lo, ratio), max(hi, ratio)
			if math.Abs(ratio-1) > proportionalTolerance {
				off = append(off, s)
			}
			row := map[string]any{"pod": s.pod.Label(), "sizeCores": float64(s.milli) / 1000,
				"sizeSource": s.source, "weight": s.weight, "sizeShare": round(sizeShare), "weightShare": round(weightShare)}
			if c := s.pod.Cgroup; c.FairCores != nil && c.DemandCores != nil {
				row["demandCores"], row["fairCores"] = round(*c.DemandCores), round(*c.FairCores)
			}
			rows = append(rows, row)
		}
		if len(off) == 0 {
			continue
		}
		sev := Warning
		if hi/lo >= 2 {
			sev = Error
		}
		// Show the pods that are off, biggest first, at most six.
		slices.SortFunc(off, func(a, b sizedPod) int { return int(b.milli - a.milli) })
		var sizes, weights []string
		for i, s := range off {
			if i == 6 {
				sizes, weights = append(sizes, "…"), append(weights, "…")
				break
			}
			sizes = append(sizes, strings.TrimSuffix(strings.TrimSuffix(cpuCount(s.milli), "s"), " CPU"))
			weights = append(weights, fmt.Sprint(s.weight))
		}
		ev := Evidence{Summary: fmt.Sprintf("%d of %d sized pods are off their size share by more than %.0f%%: sizes %s CPUs at %s %s; the pod getting the most per CPU gets %.1f× what the one getting the least does",
			len(off), len(g), proportionalTolerance*100, strings.Join(sizes, ", "), weightFile(in.Node), strings.Join(weights, ", "), hi/lo)}
		var fair, want []string
		for _, s := range off {
			if c := s.pod.Cgroup; c.FairCores != nil && c.DemandCores != nil && len(fair) < 6 {
				fair, want = append(fair, cores(*c.FairCores)), append(want, cores(*c.DemandCores))
			}
		}
		if len(fair) == len(off) || len(fair) == 6 {
			ev.Summary += fmt.Sprintf("; under the current demand (%s cores) their fair shares are %s cores",
				strings.Join(want, ", "), strings.Join(fair, ", "))
		}
		ev.Add("pods", rows).Add("unsizedSiblings", unsized[parent]).Add("spread", round(hi/lo))
		big := off[0]
		msg := fmt.Sprintf("Under contention these pods split %s by weight, not by size: %s (%s) gets %s of the CPU it would get if weights followed sizes.",
			parent.Name(), big.pod.Label(), cpuCount(big.milli), pct(float64(big.weight)/sumW/(float64(kubeletWeight(in.Node, big.milli))/sumSize)))
		r.add(Finding{Rule: rules.SizeBlindWeights, Severity: sev,
			Subject: Subject{Kind: "cgroup", Cgroup: parent.Path}, Evidence: ev, Message: msg,
			Remedy: "For BestEffort pods with a declared size: `cgwarden fix --only size-blind-weights --apply` writes each pod cgroup's " +
				weightFile(in.Node) + " (and its VM container's) from its size as the kubelet would from a request, and " +
				"`cgwarden serve --fix size-blind-weights` keeps doing it for new pods and size changes (the kubelet leaves pod " +
				"weights alone, but a recreated pod starts at its value again). The lasting fix is CPU requests from the real size " +
				"(NeonVM: spec.guest.cpus.use; KubeVirt: the VMI's vCPUs).",
		})
	}
}
