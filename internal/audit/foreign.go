package audit

import (
	"fmt"

	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// checkForeign reports the cgroups the inventory would not attach to the
// pod their name claims (inventory.Node.Foreign): a
// "<slice>:<prefix>:<id>" directory, or a pod-named cgroup, outside the
// pod's cgroup whose container ID is none of the pod's containers
// according to the runtime (CRI) or the API server. Anyone with a
// delegated cgroup subtree can make such a name; cgwarden neither moves
// its processes into the pod nor counts them in the pod's figures.
func checkForeign(in *Input, r *Report) {
	n := in.Node
	for _, c := range n.Foreign {
		id := c.Identity
		ev := Evidence{}
		ev.Add("cgroup", c.Path).Add("shape", id.Shape).Add("claimedPodUID", id.PodUID).Add("claimedContainerID", id.ContainerID)
		summary := fmt.Sprintf("%s names pod %s and container %s, which the pod's metadata does not list", c.Path, id.PodUID, layout.ShortID(id.ContainerID))
		if procs, ok := procsIn(c); ok {
			ev.Add("processes", procs)
			summary += fmt.Sprintf("; it holds %d process(es)", procs)
		}
		if c.UsageCores != nil {
			ev.Add("usageCores", round(*c.UsageCores))
			summary += fmt.Sprintf(", using %s cores", cores(*c.UsageCores))
		}
		ev.Summary = summary
		subject := Subject{Kind: "cgroup", PodUID: id.PodUID, ContainerID: id.ContainerID, Cgroup: c.Path}
		if p := n.Pod(id.PodUID); p != nil {
			subject.PodName, subject.Namespace = p.Name, p.Namespace
		}
		r.add(Finding{
			Rule: rules.ForeignCgroup, Severity: Warning, Subject: subject, Evidence: ev,
			Brief: "at " + c.Path,
			Message: "A cgroup outside the pod's cgroup is named like one of the pod's misplaced containers, but the runtime (or the " +
				"API server) lists no container of the pod with its ID: its processes are not the pod's. cgwarden does not move them " +
				"into the pod and does not count them in its figures. A container started after the metadata was read shows here " +
				"until the metadata lists it.",
			Remedy: "Find who made it (the owner of the directory and of the processes in " + c.Path + "/cgroup.procs): a local user " +
				"or service with a delegated cgroup subtree can name a directory like a pod's container to have its processes " +
				"adopted into the pod. Remove it if it is not a runtime's.",
		})
	}
}
