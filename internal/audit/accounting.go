package audit

import (
	"fmt"

	"github.com/cgwarden/cgwarden/internal/rules"
)

// Thresholds of the accounting gap: the pod cgroup must account for less
// than gapRatio of its containers' usage, and the gap must be at least
// gapMinCores (below that, two samples' rounding is not a finding).
const (
	gapRatio    = 0.8
	gapMinCores = 0.01
)

// checkAccountingGap compares, over the sampling interval, the CPU the pod
// cgroup accounted (it includes every container inside it) with the sum of
// its containers' usage wherever they are. A container outside the pod
// cgroup makes the pod read short; this is what the kubelet reports for
// the pod.
func checkAccountingGap(in *Input, r *Report) {
	// Rates exist when two samples were taken: the root's usage is then
	// known (a node without pods still says so).
	rated := in.Node.Root != nil && in.Node.Root.UsageCores != nil
	for _, p := range in.Node.Pods {
		if p.Cgroup == nil || p.Cgroup.UsageCores == nil {
			continue
		}
		rated = true
		var sum float64
		unknown, outside := 0, 0
		for _, c := range p.Containers {
			if c.Cgroup.UsageCores == nil {
				unknown++
				continue
			}
			sum += *c.Cgroup.UsageCores
			if c.Misplaced {
				outside++
			}
		}
		pod := *p.Cgroup.UsageCores
		if sum-pod < gapMinCores || pod >= gapRatio*sum {
			continue
		}
		ev := Evidence{Summary: fmt.Sprintf("pod cgroup %s accounted %s cores while its %s used %s cores (%d outside the pod cgroup): %s cores unaccounted",
			p.Cgroup.Path, cores(pod), plural(len(p.Containers)-unknown, "container"), cores(sum), outside, cores(sum-pod))}
		ev.Add("podCgroupUsageCores", round(pod)).Add("containersUsageCores", round(sum)).
			Add("gapCores", round(sum-pod)).Add("containersOutside", outside).Add("containersUnknown", unknown)
		r.add(Finding{
			Rule: rules.PodAccountingGap, Severity: Error, Subject: podSubject(p), Evidence: ev,
			Brief: fmt.Sprintf("pod cgroup %s cores, its containers %s", cores(pod), cores(sum)),
			Message: fmt.Sprintf("Everything that reads the pod cgroup sees %s cores for pod %s instead of %s: the kubelet's pod CPU "+
				"(Summary API, pod_cpu_usage_seconds_total), cAdvisor and what is built on them; kubectl top and the HPA are right "+
				"only if the runtime's own container stats are (the runwasi shim's once read 0.0005 cores for an app under load, and the HPA never scaled).",
				cores(pod), p.Label(), cores(sum)),
			Remedy: "Move the containers' processes under the pod cgroup (see misplaced-container / escaped-process for where they " +
				"are); until then `cgwarden serve` can report the pod from where its processes really are.",
		})
	}
	if !rated {
		r.note("%s not checked: CPU usage needs two samples (use --interval > 0, or a snapshot taken with an interval)", rules.PodAccountingGap)
	}
}
