package audit

import (
	"fmt"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// checkMisplaced reports containers a runtime put outside their pod's
// cgroup (seed 003's literal "<slice>:cri-containerd:<id>" directory,
// Kata's sandbox cgroups beside the pod). VM processes moved out of
// kubepods altogether are escaped-process findings instead.
func checkMisplaced(in *Input, r *Report) {
	n := in.Node
	for _, p := range n.Pods {
		for _, c := range p.Containers {
			if !c.Misplaced || c.Cgroup.Identity.Kind == layout.Escaped {
				continue
			}
			cg := c.Cgroup
			ev := Evidence{}
			ev.Add("cgroup", cg.Path).Add("shape", cg.Identity.Shape)
			podPath := "(none)"
			if p.Cgroup != nil {
				podPath = p.Cgroup.Path
			}
			ev.Add("podCgroup", podPath)
			if c.Unconfirmed != "" {
				// Only its name attaches it: `cgwarden fix` does not move it.
				ev.Add("unconfirmed", c.Unconfirmed)
			}
			summary := fmt.Sprintf("container cgroup %s is not under the pod cgroup %s", cg.Path, podPath)
			if cg.UsageCores != nil {
				ev.Add("containerUsageCores", round(*cg.UsageCores))
				summary += fmt.Sprintf("; the container uses %s cores", cores(*cg.UsageCores))
			}
			if p.Cgroup != nil && p.Cgroup.UsageCores != nil {
				ev.Add("podCgroupUsageCores", round(*p.Cgroup.UsageCores))
				summary += fmt.Sprintf(", the pod cgroup %s", cores(*p.Cgroup.UsageCores))
			}
			where := competes(n, cg)
			ev.Add("competesIn", parentPath(cg)).Add("weight", ptrVal(cg.Stats.CPU.Weight)).
				Add("guaranteedCores", round(cg.GuaranteedCores))
			summary += "; " + where
			ev.Summary = summary
			r.add(Finding{
				Rule: rules.MisplacedContainer, Severity: Error, Subject: containerSubject(p, c), Evidence: ev, Brief: at(cg),
				Message: fmt.Sprintf("The kubelet reads pod %s's CPU and memory from its pod cgroup, which does not hold these "+
					"processes: %s, and kubectl top and the HPA are only as right as the runtime's own container stats. The "+
					"pod's limits and its QoS tier's weight do not apply to these processes.",
					p.Label(), podFigures(p)),
				Remedy: "Move the processes under the pod cgroup (for each PID in " + cg.Path + "/cgroup.procs, write it to a " +
					"container cgroup made under " + podPath + "; `cgwarden fix` plans exactly this, `--apply` does it with a " +
					"journal and `cgwarden revert` undoes it), and fix the runtime so new containers land there: runwasi-based shims before their 2025 fix, " +
					"Kata with sandbox_cgroup_only=false.",
			})
		}
	}
	checkUnattachedMisplaced(n, r)
}

// checkUnattachedMisplaced reports misplaced shapes whose pod could not be
// told: Kata's kata_<sandbox id> beside the pod cgroups and its
// /kata_overhead (only a CRI source knows sandbox IDs; `kubectl get pods`
// does not list them), and literal cgroupsPath directories whose slice
// names no pod. Their processes are outside every pod cgroup all the same.
// A warning: without the pod, what it breaks cannot be said as precisely.
func checkUnattachedMisplaced(n *inventory.Node, r *Report) {
	for _, c := range n.Unattached {
		id := c.Identity
		kata := id.Kind == layout.Sandbox && (id.Shape == layout.ShapeKata || id.Shape == layout.ShapeKataOver)
		if !kata && id.Kind != layout.Misplaced {
			continue
		}
		ev := Evidence{}
		ev.Add("cgroup", c.Path).Add("shape", id.Shape)
		summary := fmt.Sprintf("%s (%s) sits outside every pod cgroup and names no pod cgwarden knows", c.Path, id.Shape)
		if procs, ok := procsIn(c); ok {
			ev.Add("processes", procs)
			what := fmt.Sprintf("%d processes", procs)
			if procs == 1 {
				what = "1 process"
			}
			summary += "; it holds " + what
		}
		if c.UsageCores != nil {
			ev.Add("usageCores", round(*c.UsageCores))
			summary += fmt.Sprintf(", using %s cores", cores(*c.UsageCores))
		}
		ev.Add("competesIn", parentPath(c)).Add("weight", ptrVal(c.Stats.CPU.Weight)).Add("guaranteedCores", round(c.GuaranteedCores))
		ev.Summary = summary + "; " + competes(n, c)
		remedy := "Find the pod (crictl inspectp <sandbox id> for Kata; the runtime's logs otherwise), move the processes under its " +
			"pod cgroup, and fix the runtime so new containers land there"
		if kata {
			remedy += ": Kata with sandbox_cgroup_only=true keeps the sandbox and its overhead inside the pod cgroup"
		}
		r.add(Finding{
			Rule: rules.MisplacedContainer, Severity: Warning, Subject: Subject{Kind: "cgroup", ContainerID: id.ContainerID, Cgroup: c.Path},
			Evidence: ev, Brief: at(c),
			Message: "A runtime's cgroup outside every pod cgroup: the processes in it escape their pod's limits and its QoS tier's " +
				"weight, and the kubelet does not count them for their pod. Which pod it belongs to is unknown here.",
			Remedy: remedy + ".",
		})
	}
}

// at is where a cgroup is for a finding's brief, with its CPU usage when
// known.
func at(c *inventory.Cgroup) string {
	if c.UsageCores == nil {
		return "at " + c.Path
	}
	return fmt.Sprintf("at %s, using %s cores", c.Path, cores(*c.UsageCores))
}

func parentPath(c *inventory.Cgroup) string {
	if c.Parent == nil {
		return "/"
	}
	return c.Parent.Path
}

// competes says where a cgroup competes for CPU, with which weight
// against whom, and what that guarantees.
func competes(n *inventory.Node, c *inventory.Cgroup) string {
	w := "unknown weight"
	if v, ok := weightOf(c); ok {
		w = fmt.Sprintf("%s %d", weightFile(n), v)
	}
	sib := siblingsOf(n, c)
	s := fmt.Sprintf("it competes in %s with %s against %.0f for its siblings", parentPath(c), w, sib.Total)
	if n.KubeRoot != nil && c.Parent == n.Root {
		if kw, ok := weightOf(n.KubeRoot); ok {
			s += fmt.Sprintf(" (the whole kubepods tree among them at %d)", kw)
		}
	}
	s += fmt.Sprintf(", guaranteed %s cores", cores(c.GuaranteedCores))
	if q := c.Stats.CPU.QuotaUs; q != nil && *q > 0 && c.Stats.CPU.PeriodUs != nil && *c.Stats.CPU.PeriodUs > 0 {
		s += fmt.Sprintf(", its own quota %s cores", cores(float64(*q)/float64(*c.Stats.CPU.PeriodUs)))
	}
	return s
}

func ptrVal[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// podFigures says what the kubelet's pod figures miss: everything when no
// container of the pod is inside its cgroup (seed 003), otherwise the
// misplaced ones' share.
func podFigures(p *inventory.Pod) string {
	for _, c := range p.Containers {
		if !c.Misplaced && !c.Sandbox && !c.Leftover {
			return "the pod's CPU and memory leave these processes out"
		}
	}
	return "it reports the pod at 0 CPU and 0 memory"
}
