package audit

import (
	"fmt"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// checkOrphans reports pod cgroups whose pod the metadata does not know:
// with processes (a pod deleted while its processes live on, or metadata
// from another node), or empty leftovers the kubelet failed to remove.
// Only when metadata was given — without it every pod would look
// orphaned.
func checkOrphans(in *Input, r *Report) {
	if in.Meta == nil || in.Meta.Len() == 0 {
		r.note("%s not checked: no pod metadata (give --pods)", rules.OrphanCgroup)
		return
	}
	// Metadata that names none of the node's pods is another node's (or
	// another time's): every pod would look orphaned, busy ones included.
	withCgroup, known := 0, 0
	for _, p := range in.Node.Pods {
		if p.Cgroup == nil {
			continue
		}
		withCgroup++
		if _, ok := in.Meta.Pod(p.UID); ok {
			known++
		}
	}
	switch {
	case withCgroup > 0 && known == 0:
		r.note("%s not checked: the pod metadata names none of the node's %d pods (it is from another node, or another time)", rules.OrphanCgroup, withCgroup)
		return
	case known < withCgroup && known*2 <= withCgroup:
		r.note("%s: the pod metadata names only %d of the node's %d pods; if it is from another node or another time, the pods reported as orphaned are not", rules.OrphanCgroup, known, withCgroup)
	}
	for _, p := range in.Node.Pods {
		if p.Cgroup == nil {
			continue
		}
		if _, ok := in.Meta.Pod(p.UID); ok {
			continue
		}
		procs, known := podProcs(p)
		ev := Evidence{}
		ev.Add("cgroup", p.Cgroup.Path)
		if known {
			ev.Add("processes", procs)
		}
		if outside := outsideContainers(p); outside > 0 {
			ev.Add("containersOutside", outside)
		}
		if p.Cgroup.UsageCores != nil {
			ev.Add("usageCores", round(*p.Cgroup.UsageCores))
		}
		f := Finding{Rule: rules.OrphanCgroup, Subject: podSubject(p), Evidence: ev}
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
			if n := outsideContainers(p); n > 0 {
				ev.Summary = fmt.Sprintf("pod cgroup %s names pod %s, which the metadata does not list; with its %d container cgroup(s) outside it, the pod holds %s", p.Cgroup.Path, p.UID, n, what)
			}
			f.Message = "Processes of a pod the metadata does not know take CPU and memory under kubepods: a pod deleted while its " +
				"processes live on, or metadata taken from another node or at another time."
			f.Remedy = "Check that the pods file is this node's and current; if the pod is really gone, find the processes (cgroup.procs) and stop them through their runtime (crictl)."
		}
		f.Evidence = ev
		r.add(f)
	}
}

// podProcs counts the processes of a pod wherever they are: in its cgroup
// and in its container cgroups outside it (misplaced ones, Kata
// sandboxes). A pod cgroup that is empty while a container of its pod
// runs elsewhere is no leftover: removing it is never advised.
func podProcs(p *inventory.Pod) (n int, known bool) {
	n, known = procsIn(p.Cgroup)
	for _, c := range p.Containers {
		if c.Cgroup == nil || cgroupfs.Within(c.Cgroup.Path, p.Cgroup.Path) {
			continue
		}
		m, k := procsIn(c.Cgroup)
		n += m
		known = known && k
	}
	return n, known
}

// outsideContainers counts a pod's container cgroups outside its cgroup.
func outsideContainers(p *inventory.Pod) int {
	n := 0
	for _, c := range p.Containers {
		if c.Cgroup != nil && !cgroupfs.Within(c.Cgroup.Path, p.Cgroup.Path) {
			n++
		}
	}
	return n
}
