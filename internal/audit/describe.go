package audit

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/mounts"
)

func podSubject(p *inventory.Pod) Subject {
	s := Subject{Kind: "pod", PodUID: p.UID, PodName: p.Name, Namespace: p.Namespace}
	if p.Cgroup != nil {
		s.Cgroup = p.Cgroup.Path
	}
	return s
}

func containerSubject(p *inventory.Pod, c *inventory.Container) Subject {
	return Subject{Kind: "container", PodUID: p.UID, PodName: p.Name, Namespace: p.Namespace,
		Container: c.Name, ContainerID: c.ID, Cgroup: c.Cgroup.Path}
}

// cores prints a CPU figure with two significant digits below 0.1 (so
// 0.00055 is not rounded to 0), two decimals up to 10, one above.
func cores(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 0.1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 1e-9:
		return strconv.FormatFloat(v, 'e', 1, 64)
	}
	d := int(-math.Floor(math.Log10(v))) + 1
	return strconv.FormatFloat(v, 'f', d, 64)
}

// round keeps figures in JSON readable without losing what matters.
func round(v float64) float64 {
	if v == 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return v
	}
	mag := math.Pow(10, 4-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*mag) / mag
}

func pct(v float64) string {
	switch {
	case v >= 0.1:
		return strconv.FormatFloat(v*100, 'f', 0, 64) + "%"
	case v >= 0.001:
		return strconv.FormatFloat(v*100, 'f', 1, 64) + "%"
	}
	return cores(v*100) + "%"
}

// cpuCount prints a size in CPUs: "0.25 CPU", "4 CPUs".
func cpuCount(milli int64) string {
	s := strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64)
	if milli == 1000 || milli < 1000 {
		return s + " CPU"
	}
	return s + " CPUs"
}

func weightOf(c *inventory.Cgroup) (uint64, bool) {
	if c == nil || c.Stats.CPU.Weight == nil {
		return 0, false
	}
	return *c.Stats.CPU.Weight, true
}

// weightFile is the name of the weight file on the node's version.
func weightFile(n *inventory.Node) string { return fairness.WeightFile(n.Version == mounts.V2) }

// kubeletWeight is the weight the kubelet writes for a pod or QoS cgroup
// whose CPU requests sum to milli: the shares on v1, the linear
// conversion of them on v2.
func kubeletWeight(n *inventory.Node, milli int64) uint64 {
	return fairness.PodWeight(n.Version == mounts.V2, fairness.MilliCPUToShares(milli))
}

// siblings sums the weights competing with c under its parent: the other
// child cgroups (unknown weights at the default) and, on v1, the threads
// sitting in the parent (1024 each). It also breaks the sum down by kind
// for the evidence.
type siblingSum struct {
	Total      float64
	Tiers      map[string]uint64 // QoS tier → weight
	Guaranteed struct {
		Count int
		Sum   uint64
	}
	Other struct {
		Count int
		Sum   float64
	}
	Threads int
}

func siblingsOf(n *inventory.Node, c *inventory.Cgroup) siblingSum {
	var s siblingSum
	s.Tiers = map[string]uint64{}
	if c.Parent == nil {
		return s
	}
	def := float64(fairness.DefaultShares)
	if n.Version == mounts.V2 {
		def = fairness.DefaultWeight
	}
	for _, sib := range c.Parent.Children {
		if sib == c {
			continue
		}
		w, ok := weightOf(sib)
		wf := def
		if ok {
			wf = float64(w)
		}
		s.Total += wf
		switch {
		case ok && sib.Identity.Kind == layout.QoSTier:
			s.Tiers[sib.Identity.QoS] = w
		case ok && sib.Identity.Kind == layout.Pod:
			s.Guaranteed.Count++
			s.Guaranteed.Sum += w
		default:
			s.Other.Count++
			s.Other.Sum += wf
		}
	}
	if n.Version != mounts.V2 && c.Parent.Parent != nil && c.Parent.Stats.Threads != nil {
		s.Threads = *c.Parent.Stats.Threads
		s.Total += float64(s.Threads) * fairness.ThreadWeightV1
	}
	return s
}

// describe writes "32076 (Burstable tier) + 9984 (6 Guaranteed pods)".
func (s siblingSum) describe() string {
	var parts []string
	for _, q := range []struct{ qos, title string }{{layout.Burstable, "Burstable"}, {layout.BestEffort, "BestEffort"}} {
		if w, ok := s.Tiers[q.qos]; ok {
			parts = append(parts, fmt.Sprintf("%d (%s tier)", w, q.title))
		}
	}
	if s.Guaranteed.Count > 0 {
		parts = append(parts, fmt.Sprintf("%d (%s)", s.Guaranteed.Sum, plural(s.Guaranteed.Count, "Guaranteed pod")))
	}
	if s.Other.Count > 0 {
		parts = append(parts, fmt.Sprintf("%.0f (%s)", s.Other.Sum, plural(s.Other.Count, "other cgroup")))
	}
	if s.Threads > 0 {
		parts = append(parts, fmt.Sprintf("%d (%s × 1024)", s.Threads*fairness.ThreadWeightV1, plural(s.Threads, "thread")))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, " + ")
}

// plural writes "1 pod", "2 pods".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// vmLabel says whether a pod is a VM runner by its labels, and which VM.
func vmLabel(mp *metadata.Pod) (string, bool) {
	kind, name, ok := metadata.VMOf(mp)
	if !ok {
		return "", false
	}
	return kind + " " + name, true
}

// procsIn counts the processes in c and below; known is false when a
// cgroup.procs file in the subtree could not be read.
func procsIn(c *inventory.Cgroup) (n int, known bool) {
	known = true
	c.Walk(func(x *inventory.Cgroup) {
		if x.Stats.Procs == nil {
			known = false
			return
		}
		n += *x.Stats.Procs
	})
	return n, known
}

// fairSize is the size a pod's weight should follow: a declared size (VM,
// annotation) when there is one, else its CPU requests. Limits are a cap,
// not a size, for a pod that has requests.
func fairSize(meta *metadata.Set, uid string) (metadata.Size, bool) {
	sz, ok := meta.Size(uid)
	if !ok {
		return sz, false
	}
	if sz.Source == "limits" {
		if mp, found := meta.Pod(uid); found && mp.RequestMilliCPU != nil && *mp.RequestMilliCPU > 0 {
			return metadata.Size{MilliCPU: *mp.RequestMilliCPU, Source: "requests"}, true
		}
	}
	return sz, true
}
