package audit

import (
	"fmt"
)

// RuleOrphanCgroup: pod cgroups with no pod in the metadata.
const RuleOrphanCgroup = "orphan-cgroup"

// checkOrphans reports pod cgroups whose pod the metadata does not know:
// with processes (a pod deleted while its processes live on, or metadata
// from another node), or empty leftovers the kubelet failed to remove.
// Only when metadata was given — without it every pod would look
// orphaned.
func checkOrphans(in *Input, r *Report) {
	if in.Meta == nil || in.Meta.Len() == 0 {
		r.note("%s not checked: no pod metadata (give --pods)", RuleOrphanCgroup)
		return
	}
	for _, p := range in.Node.Pods {
		if p.Cgroup == nil {
			continue
		}
		if _, ok := in.Meta.Pod(p.UID); ok {
			continue
		}
		procs, known := procsIn(p.Cgroup)
		ev := Evidence{}
		ev.Add("cgroup", p.Cgroup.Path)
		if known {
			ev.Add("processes", procs)
		}
		if p.Cgroup.UsageCores != nil {
			ev.Add("usageCores", round(*p.Cgroup.UsageCores))
		}
		f := Finding{Rule: RuleOrphanCgroup, Subject: podSubject(p), Evidence: ev}
		switch {
		case known && procs == 0:
			f.Severity = Info
			ev.Summary = fmt.Sprintf("pod cgroup %s names pod %s, which the metadata does not list, and holds no process", p.Cgroup.Path, p.UID)
			f.Message = "An empty leftover of a pod that is gone: harmless, but it clutters the tree and its weight still counts among its siblings'."
			f.Remedy = "Remove it, deepest directories first (rmdir), in every hierarchy; the kubelet normally does this itself."
		default:
			f.Severity = Warning
			what := fmt.Sprintf("%d processes", procs)
			if !known {
				what = "processes (count unknown)"
			}
			ev.Summary = fmt.Sprintf("pod cgroup %s names pod %s, which the metadata does not list, and holds %s", p.Cgroup.Path, p.UID, what)
			f.Message = "Processes of a pod the metadata does not know take CPU and memory under kubepods: a pod deleted while its " +
				"processes live on, or metadata taken from another node or at another time."
			f.Remedy = "Check that the pods file is this node's and current; if the pod is really gone, find the processes (cgroup.procs) and stop them through their runtime (crictl)."
		}
		f.Evidence = ev
		r.add(f)
	}
}
