package audit

import (
	"fmt"
	"math"
	"strings"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// tierTolerance lets the Burstable tier lag a pod that just came or went:
// the kubelet refreshes it about every minute.
const tierTolerance = 0.01

// checkTierDrift compares weights with what the requests imply:
//   - the BestEffort tier with the minimum (v1 2 shares, v2 weight 1), which
//     the kubelet writes and re-applies;
//   - the Burstable tier with MilliCPUToShares(sum of the Burstable pods'
//     requests) (v2: the linear conversion of it), when every Burstable pod
//     on the node is in the metadata;
//   - each pod with MilliCPUToShares(its requests), when it is in the
//     metadata (a pod weighted by its declared size — cgwarden's own fix —
//     is left alone);
//   - on v2, the containers of a pod: the runtime converts their shares
//     with its own (log-shaped) formula while the kubelet used the linear
//     one for the pod, so containers of one pod split its CPU in a ratio
//     their requests do not say. Reported when some container's share
//     strays by more than 10%.
func checkTierDrift(in *Input, r *Report) {
	n := in.Node
	if n.KubeRoot == nil {
		return
	}
	for _, tier := range n.KubeRoot.Children {
		if tier.Identity.Kind != layout.QoSTier {
			continue
		}
		w, ok := weightOf(tier)
		if !ok {
			continue
		}
		switch tier.Identity.QoS {
		case layout.BestEffort:
			want := kubeletWeight(n, 0)
			if in.Meta != nil {
				if in.loadViews(); in.viewsHeld && len(in.views) > 0 {
					continue // weighed by its sized pods on purpose: held-weights says so
				}
			}
			if w != want {
				drift(r, n, tier, w, want, fmt.Sprintf("the kubelet writes %d for the BestEffort tier", want),
					"The kubelet re-applies the BestEffort tier's weight about every minute: this value will not last, and "+
						"whatever relies on it (a hand-made fix, another agent) is undone.",
					"Do not tune the tier by hand; give the pods that need CPU requests, or declare the sizes of VM and sandbox "+
						"pods (annotation "+vmsize.AnnotationCPU+", --vms) and let `cgwarden serve --fix besteffort-starvation` hold the tier.")
			}
		case layout.Burstable:
			checkBurstableTier(in, r, tier, w)
		}
	}
	if in.Meta == nil {
		r.note("%s: pod weights not compared with requests: no pod metadata (give --pods)", rules.TierDrift)
		return
	}
	for _, p := range n.Pods {
		mp, ok := in.Meta.Pod(p.UID)
		if !ok || p.Cgroup == nil || mp.RequestMilliCPU == nil {
			continue
		}
		w, ok := weightOf(p.Cgroup)
		if !ok {
			continue
		}
		want := kubeletWeight(n, *mp.RequestMilliCPU)
		if w != want {
			if sz, sized := in.Meta.Size(p.UID); sized && w == kubeletWeight(n, sz.MilliCPU) {
				continue // weighted by its declared size on purpose
			}
			drift(r, n, p.Cgroup, w, want,
				fmt.Sprintf("pod %s requests %dm CPU → the kubelet writes %d", p.Label(), *mp.RequestMilliCPU, want),
				fmt.Sprintf("Pod %s competes with its siblings at %d where its requests say %d: under contention it gets %s of what its requests promise.",
					p.Label(), w, want, pct(float64(w)/float64(want))),
				"Find what wrote the weight (another agent, a runtime hook, a hand-made change) and stop it; the kubelet does not "+
					"rewrite pod weights, so restoring "+fmt.Sprint(want)+" by hand sticks.")
		}
		if n.Version == mounts.V2 {
			checkContainerFormula(r, n, p, mp)
		}
	}
}

func checkBurstableTier(in *Input, r *Report, tier *inventory.Cgroup, w uint64) {
	n := in.Node
	if in.Meta == nil {
		return
	}
	var sum int64
	missing := 0
	for _, p := range n.Pods {
		if p.QoS != layout.Burstable || p.Cgroup == nil || p.Cgroup.Parent != tier {
			continue
		}
		mp, ok := in.Meta.Pod(p.UID)
		if !ok || mp.RequestMilliCPU == nil {
			missing++
			continue
		}
		sum += *mp.RequestMilliCPU
	}
	if missing > 0 {
		r.note("%s: Burstable tier not compared with requests: %d Burstable pods are not in the metadata", rules.TierDrift, missing)
		return
	}
	want := kubeletWeight(n, sum)
	if math.Abs(float64(w)-float64(want)) <= max(2, tierTolerance*float64(want)) {
		return
	}
	msg := fmt.Sprintf("The Burstable tier weighs %d where its pods' requests say %d: under contention all Burstable pods together get %s of what their requests promise against Guaranteed pods and the BestEffort tier.",
		w, want, pct(float64(w)/float64(want)))
	if sum == 0 {
		// No request to promise anything: a ratio to the minimum weight
		// (e.g. "1603800%") would say nothing true.
		msg = fmt.Sprintf("No Burstable pod requests CPU, so the kubelet gives the Burstable tier the minimum weight, %d; the tier weighs %d: "+
			"under contention the Burstable pods together take CPU from Guaranteed pods and the BestEffort tier that no request of theirs asks for.", want, w)
	}
	drift(r, n, tier, w, want, fmt.Sprintf("Burstable pods request %dm CPU in total → the kubelet writes %d", sum, want), msg,
		"The kubelet refreshes this value about every minute; if it stays off, look for another agent writing it, or check that the pods file is this node's and current.")
}

func drift(r *Report, n *inventory.Node, c *inventory.Cgroup, have, want uint64, why, msg, remedy string) {
	ev := Evidence{Summary: fmt.Sprintf("%s is %d; %s", weightFile(n), have, why)}
	ev.Add("weight", have).Add("expectedWeight", want)
	subj := Subject{Kind: "cgroup", Cgroup: c.Path}
	if c.Identity.Kind == layout.QoSTier {
		subj.Kind = "tier"
	}
	r.add(Finding{Rule: rules.TierDrift, Severity: Warning, Subject: subj, Evidence: ev, Message: msg, Remedy: remedy})
}

// checkContainerFormula finds, on v2, the containers of a pod whose
// weights follow the runtime's conversion of their shares, and says how
// far that moves their split from the one their requests say.
func checkContainerFormula(r *Report, n *inventory.Node, p *inventory.Pod, mp *metadata.Pod) {
	type ctr struct {
		name        string
		req         int64
		have, lin   uint64
		runtimeConv bool
	}
	var cs []ctr
	var sumReq int64
	var sumHave, sumLin float64
	runtimeSeen := false
	for _, c := range p.Containers {
		if c.Misplaced || c.Sandbox {
			continue
		}
		w, ok := weightOf(c.Cgroup)
		var req *int64
		for _, mc := range mp.Containers {
			if mc.ID == c.ID {
				req = mc.RequestMilliCPU
			}
		}
		if !ok || req == nil {
			continue
		}
		s := fairness.MilliCPUToShares(*req)
		lin, rt := fairness.SharesToWeightLinear(s), fairness.SharesToWeightRuntime(s)
		x := ctr{name: c.Name, req: *req, have: w, lin: lin, runtimeConv: w == rt && rt != lin}
		runtimeSeen = runtimeSeen || x.runtimeConv
		cs = append(cs, x)
		sumReq += *req
		sumHave += float64(w)
		sumLin += float64(lin)
	}
	if !runtimeSeen || len(cs) < 2 || sumReq == 0 {
		return
	}
	worst, worstName := 0.0, ""
	var parts []string
	for _, c := range cs {
		want := float64(c.req) / float64(sumReq)
		got := float64(c.have) / sumHave
		parts = append(parts, fmt.Sprintf("%s %dm → weight %d (linear %d): %s of the pod where requests say %s", c.name, c.req, c.have, c.lin, pct(got), pct(want)))
		if want > 0 && math.Abs(got/want-1) > worst {
			worst, worstName = math.Abs(got/want-1), c.name
		}
	}
	if worst <= proportionalTolerance {
		return
	}
	ev := Evidence{Summary: "container weights follow the runtime's conversion, the pod's the kubelet's linear one: " + strings.Join(parts, "; ")}
	ev.Add("maxDeviation", round(worst))
	r.add(Finding{Rule: rules.TierDrift, Severity: Warning, Subject: podSubject(p), Evidence: ev,
		Message: fmt.Sprintf("Inside pod %s the containers split the pod's CPU by weights the runtime converted with its own formula: under contention %s gets %s more or less than its request says.",
			p.Label(), worstName, pct(worst)),
		Remedy: "Nothing to change in the pod spec: write each container cgroup's cpu.weight from the linear formula " +
			"(1 + (shares-2)*9999/262142) if the in-pod split matters, or keep one busy container per pod.",
	})
}
