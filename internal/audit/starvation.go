package audit

import (
	"fmt"
	"strconv"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// weightText is a cgroup's raw weight for a message, "?" when unknown.
func weightText(c *inventory.Cgroup) string {
	if w, ok := weightOf(c); ok {
		return strconv.FormatUint(w, 10)
	}
	return "?"
}

// checkStarvation reports every BestEffort pod guaranteed less than
// Input.StarvationCores. The kubelet gives the whole BestEffort tier the
// minimum weight (2 shares) and each pod in it 2 more, so under contention
// the tier shares a sliver among all its pods, whatever their size. A pod
// that declares a size (a VM, the cgwarden.io/cpu annotation, limits) is
// an error: it was meant to get that size. A pod without one is a warning:
// BestEffort may be what its owner wanted.
func checkStarvation(in *Input, r *Report) {
	n := in.Node
	for _, p := range n.Pods {
		c := p.Cgroup
		if p.QoS != layout.BestEffort || c == nil || c.Parent == nil || c.Parent.Identity.Kind != layout.QoSTier {
			continue
		}
		if c.GuaranteedCores >= in.StarvationCores {
			continue
		}
		tier := c.Parent
		// An unknown weight reads "?" (and null in JSON), never 0; in the
		// tier's total it counts at the default, as siblingsOf counts others.
		tierW, podW := weightText(tier), weightText(c)
		podWf := float64(fairness.DefaultShares)
		if n.Version == mounts.V2 {
			podWf = fairness.DefaultWeight
		}
		if w, ok := weightOf(c); ok {
			podWf = float64(w)
		}
		sib := siblingsOf(n, tier)
		inTier := siblingsOf(n, c)
		ev := Evidence{}
		ev.Add("tierWeight", ptrVal(tier.Stats.CPU.Weight)).Add("tierSiblingsWeight", sib.Total).
			Add("tierGuaranteedCores", round(tier.GuaranteedCores)).
			Add("podWeight", ptrVal(c.Stats.CPU.Weight)).Add("podsInTier", len(tier.Children)).
			Add("podGuaranteedCores", round(c.GuaranteedCores)).
			Add("thresholdCores", in.StarvationCores)
		summary := fmt.Sprintf("%s %s against %s = %.0f → tier guaranteed %s cores of %s; pod weight %s of the tier's %.0f (%s) → %s cores",
			weightFile(n), tierW, sib.describe(), sib.Total, cores(tier.GuaranteedCores), cores(tier.Parent.GuaranteedCores),
			podW, inTier.Total+podWf, plural(len(tier.Children), "pod"), cores(c.GuaranteedCores))

		mp, _ := in.Meta.Pod(p.UID)
		sz, sized := in.Meta.Size(p.UID)
		sev := Warning
		msg := fmt.Sprintf("Under CPU contention pod %s is guaranteed %s cores: any busy Burstable or Guaranteed pod can starve it.",
			p.Label(), cores(c.GuaranteedCores))
		if sized {
			sev = Error
			ev.Add("sizeCores", float64(sz.MilliCPU)/1000).Add("sizeSource", sz.Source)
			share := c.GuaranteedCores / (float64(sz.MilliCPU) / 1000)
			summary += fmt.Sprintf("; declared size %s (%s) → %s of it", cpuCount(sz.MilliCPU), sz.Source, pct(share))
			what := "pod"
			if vm, ok := vmLabel(mp); ok {
				what = vm
			}
			msg = fmt.Sprintf("Under CPU contention this %s-CPU %s is guaranteed %s cores, %s of its size: any busy Burstable or Guaranteed pod can starve it, and it gets the same sliver as every other BestEffort pod whatever its size.",
				strconv.FormatFloat(float64(sz.MilliCPU)/1000, 'f', -1, 64), what, cores(c.GuaranteedCores), pct(share))
			if v, ok := in.sized(p.UID); ok {
				ev.Add("targetWeight", v.Target).Add("targetTierWeight", v.TierTarget).Add("guaranteedCoresAtTarget", round(v.AtTarget))
				summary += fmt.Sprintf("; weighed by its size (pod %d, tier %d) it would be guaranteed %s cores", v.Target, v.TierTarget, cores(v.AtTarget))
			}
		} else if vm, ok := vmLabel(mp); ok {
			r.note("%s runs %s, whose size is unknown: give --vms to judge it against its size", p.Label(), vm)
		} else if in.Meta == nil {
			r.note("BestEffort pods without metadata cannot be told from VMs of any size: give --pods (and --vms)")
		}
		if c.DemandCores != nil && c.FairCores != nil {
			ev.Add("demandCores", round(*c.DemandCores)).Add("fairCores", round(*c.FairCores))
			summary += fmt.Sprintf("; it wants %s cores now and its fair share under the current demand is %s",
				cores(*c.DemandCores), cores(*c.FairCores))
		}
		if c.UsageCores != nil {
			ev.Add("usageCores", round(*c.UsageCores))
			summary += fmt.Sprintf("; using %s", cores(*c.UsageCores))
		}
		ev.Summary = summary
		brief := fmt.Sprintf("pod weight %s, tier %s against %.0f → guaranteed %s cores", podW, tierW, sib.Total, cores(c.GuaranteedCores))
		if sized {
			brief += fmt.Sprintf(" for a size of %s (%s)", cpuCount(sz.MilliCPU), pct(c.GuaranteedCores/(float64(sz.MilliCPU)/1000)))
		}
		if c.DemandCores != nil && c.FairCores != nil {
			brief += fmt.Sprintf("; wants %s, fair share now %s", cores(*c.DemandCores), cores(*c.FairCores))
		}
		r.add(Finding{
			Rule: rules.BestEffortStarvation, Severity: sev, Subject: podSubject(p), Evidence: ev, Message: msg, Brief: brief,
			Remedy: remedyStarvation(sized),
		})
	}
}

// remedyStarvation is the remedy of a starved pod: with a declared size,
// cgwarden's weights; without one, a size first.
func remedyStarvation(sized bool) string {
	lasting := "The lasting fix is CPU requests that match the pod's size, set when it is created (it becomes Burstable and weighs " +
		"what it requests; NeonVM: requests from spec.guest.cpus.use, kept equal to the live size by in-place resize)."
	if !sized {
		return "If the pod is a VM or sandbox of a known size, declare it (annotation " + vmsize.AnnotationCPU + ", or its VM object " +
			"with --vms) and cgwarden can weigh it by that size. " + lasting
	}
	return "Weigh sized BestEffort pods by their size: `cgwarden fix --only size-blind-weights,besteffort-starvation --apply` " +
		"(the pod and its VM container get the shares the kubelet would give its size as a request, the tier 2 + their sum), and " +
		"`cgwarden serve --fix size-blind-weights,besteffort-starvation` to hold the tier against the kubelet, which resets it to " +
		"the minimum within a minute. " + lasting
}
