package audit

import (
	"fmt"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// checkEscaped reports cgroups a VM runner made for a pod's processes
// outside kubepods (NeonVM's /<pod>-vm-runner, neonvm-qemu-<pod>), whether
// or not the metadata names the pod.
func checkEscaped(in *Input, r *Report) {
	n := in.Node
	report := func(subj Subject, who string, c *inventory.Cgroup) {
		ev := Evidence{}
		ev.Add("cgroup", c.Path).Add("shape", c.Identity.Shape).Add("weight", ptrVal(c.Stats.CPU.Weight)).
			Add("guaranteedCores", round(c.GuaranteedCores))
		where := competes(n, c)
		summary := fmt.Sprintf("%s holds processes of %s outside %s; %s", c.Path, who, kubeRootPath(n), where)
		if c.UsageCores != nil {
			ev.Add("usageCores", round(*c.UsageCores))
			summary += fmt.Sprintf("; using %s cores", cores(*c.UsageCores))
		}
		if procs, ok := procsIn(c); ok {
			ev.Add("processes", procs)
		}
		ev.Summary = summary
		r.add(Finding{
			Rule: rules.EscapedProcess, Severity: Error, Subject: subj, Evidence: ev, Brief: at(c),
			Message: fmt.Sprintf("Processes of %s run outside the kubelet's tree: the pod's limits, its QoS tier's weight and the "+
				"node-allocatable limits do not apply to them, they take CPU from every pod by their own weight, and the kubelet "+
				"does not count their CPU and memory for the pod.", who),
			Remedy: "Move the processes back under the pod's cgroup (NeonVM: a runner that creates the QEMU cgroup inside its own " +
				"container cgroup, neonvm #441). `cgwarden fix` does not move these: they name the pod but no container, so it " +
				"lists them as skipped rather than guess which container cgroup they belong in; move them by hand into the " +
				"runner container's cgroup.",
		})
	}
	for _, p := range n.Pods {
		for _, c := range p.Containers {
			if c.Cgroup.Identity.Kind == layout.Escaped {
				s := containerSubject(p, c)
				s.Kind = "cgroup"
				report(s, "pod "+p.Label(), c.Cgroup)
			}
		}
	}
	for _, c := range n.Unattached {
		if c.Identity.Kind != layout.Escaped {
			continue
		}
		report(Subject{Kind: "cgroup", PodName: c.Identity.PodName, Cgroup: c.Path},
			"pod "+c.Identity.PodName+" (not in the metadata)", c)
	}
}

func kubeRootPath(n *inventory.Node) string {
	if n.KubeRoot != nil {
		return n.KubeRoot.Path
	}
	return "kubepods"
}
