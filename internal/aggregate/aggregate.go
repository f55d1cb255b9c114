package aggregate

import (
	"slices"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/stats"
)

// Usage is the CPU and memory of a pod, container or node at one scan.
// Every pointer is nil when unknown.
type Usage struct {
	// CPUUsageNs is cumulative CPU time in nanoseconds.
	CPUUsageNs *uint64
	// CPUCores is the CPU rate between the last two scans, in cores.
	CPUCores *float64
	// MemoryUsageBytes is memory.current / memory.usage_in_bytes.
	MemoryUsageBytes *uint64
	// WorkingSetBytes follows the kubelet: usage minus inactive file pages.
	WorkingSetBytes *uint64
	RSSBytes        *uint64
	PageFaults      *uint64
	MajorPageFaults *uint64
	// MemoryLimitBytes is the hard limit that applies to the whole figure,
	// stats.Unlimited for none; nil when unknown or when the parts summed
	// do not share one limit.
	MemoryLimitBytes *int64
}

// AvailableBytes is the kubelet's availableBytes: limit minus working set
// (floored at 0), only when a limit is set and both are known.
func (u Usage) AvailableBytes() *uint64 {
	if u.MemoryLimitBytes == nil || *u.MemoryLimitBytes == stats.Unlimited || *u.MemoryLimitBytes < 0 || u.WorkingSetBytes == nil {
		return nil
	}
	lim := uint64(*u.MemoryLimitBytes)
	var a uint64
	if lim > *u.WorkingSetBytes {
		a = lim - *u.WorkingSetBytes
	}
	return &a
}

// Own is a cgroup's own figures (everything below it included, as the
// kernel accounts hierarchically).
func Own(c *inventory.Cgroup) Usage {
	if c == nil {
		return Usage{}
	}
	s := c.Stats
	return Usage{
		CPUUsageNs:       s.CPU.UsageNs,
		CPUCores:         c.UsageCores,
		MemoryUsageBytes: s.Memory.UsageBytes,
		WorkingSetBytes:  s.Memory.WorkingSetBytes,
		RSSBytes:         s.Memory.RSSBytes,
		PageFaults:       s.Memory.PageFaults,
		MajorPageFaults:  s.Memory.MajorPageFaults,
		MemoryLimitBytes: s.Memory.LimitBytes,
	}
}

// sum adds the figures of parts; a field is unknown when it is unknown in
// any part. The memory limit is kept only for a single part: a limit on one
// cgroup does not bound processes in another.
func sum(parts []Usage) Usage {
	if len(parts) == 0 {
		return Usage{}
	}
	out := parts[0]
	for _, p := range parts[1:] {
		// A leftover's counters, and the part's rate; no one limit.
		out = withLeftover(out, p)
		out.CPUCores = add(out.CPUCores, p.CPUCores)
		out.MemoryLimitBytes = nil
	}
	return out
}

// add is a + b, unknown (nil) when either is.
func add[T uint64 | float64](a, b *T) *T {
	if a == nil || b == nil {
		return nil
	}
	v := *a + *b
	return &v
}

// Pod is a pod with its corrected figures.
type Pod struct {
	*inventory.Pod
	Usage Usage
	// Parts are the cgroups summed into Usage: the pod cgroup (when it
	// exists) and every container or sandbox cgroup of the pod outside it.
	Parts []*inventory.Cgroup
	// Outside is set when at least one container or sandbox cgroup of the
	// pod lives outside the pod cgroup (or there is no pod cgroup); an
	// emptied leftover does not count.
	Outside bool
	// Containers are the pod's containers (sandboxes excluded: the kubelet
	// does not report them as containers) with their own figures.
	Containers []Container
}

// Container is a container with the figures of its own cgroup, or of its
// cgroups summed when it has two busy ones (in the pod and outside it).
type Container struct {
	*inventory.Container
	Usage Usage
}

// Pods computes the corrected figures of every pod of n, in n's order.
func Pods(n *inventory.Node) []Pod {
	out := make([]Pod, 0, len(n.Pods))
	for _, p := range n.Pods {
		out = append(out, ForPod(p))
	}
	return out
}

// ForPod computes one pod's corrected figures.
func ForPod(p *inventory.Pod) Pod {
	ap := Pod{Pod: p}
	if p.Cgroup != nil {
		ap.Parts = append(ap.Parts, p.Cgroup)
	}
	for _, c := range p.Containers {
		if p.Cgroup == nil || !c.Cgroup.Within(p.Cgroup) {
			ap.Parts = append(ap.Parts, c.Cgroup)
			// An emptied leftover still counts (what it used before its
			// processes were moved home) but places nothing outside.
			ap.Outside = ap.Outside || !c.Leftover
		}
		// A leftover's cgroup counts toward the pod (above) but is not a
		// container of its own: its twin inside the pod is, and takes its
		// figures (below, once every twin is known).
		if c.Sandbox || c.Leftover {
			continue
		}
		// One container in two busy cgroups (moved home, then the runtime
		// started processes in its own cgroup again) is one container
		// using both, named by its cgroup in the pod.
		if i := slices.IndexFunc(ap.Containers, func(o Container) bool { return c.ID != "" && o.ID == c.ID }); i >= 0 {
			ac := &ap.Containers[i]
			ac.Usage = sum([]Usage{ac.Usage, Own(c.Cgroup)})
			if ac.Misplaced && !c.Misplaced {
				ac.Container = c
			}
			continue
		}
		ap.Containers = append(ap.Containers, Container{Container: c, Usage: Own(c.Cgroup)})
	}
	foldLeftovers(p, ap.Containers)
	parts := make([]Usage, len(ap.Parts))
	for i, c := range ap.Parts {
		parts[i] = Own(c)
	}
	ap.Usage = sum(parts)
	return ap
}

// foldLeftovers adds each leftover's figures (the runtime's emptied
// directory of a container moved home) to the container it was: its
// frozen CPU counter, so that the container's cumulative CPU does not
// fall back to what the new cgroup counted since the move (a counter that
// drops reads as a reset to every rate()), and the memory still charged
// there (charges stay where they were made on cgroup v2 and on v1 from
// Linux 6.13, which removed charge moving). Without them metrics-server
// drops a moved container whose new cgroup has no memory charged yet
// ("Failed getting complete container metric") and the HPA reads its pod
// as unknown.
func foldLeftovers(p *inventory.Pod, cs []Container) {
	for _, c := range p.Containers {
		if !c.Leftover || c.ID == "" {
			continue
		}
		if i := slices.IndexFunc(cs, func(o Container) bool { return o.ID == c.ID }); i >= 0 {
			cs[i].Usage = withLeftover(cs[i].Usage, Own(c.Cgroup))
		}
	}
}

// withLeftover is u with a leftover's counters and charges added: its
// cumulative CPU and its memory; not its rate (it runs nothing) nor a
// limit.
func withLeftover(u, left Usage) Usage {
	u.CPUUsageNs = add(u.CPUUsageNs, left.CPUUsageNs)
	u.MemoryUsageBytes = add(u.MemoryUsageBytes, left.MemoryUsageBytes)
	u.WorkingSetBytes = add(u.WorkingSetBytes, left.WorkingSetBytes)
	u.RSSBytes = add(u.RSSBytes, left.RSSBytes)
	u.PageFaults = add(u.PageFaults, left.PageFaults)
	u.MajorPageFaults = add(u.MajorPageFaults, left.MajorPageFaults)
	return u
}
