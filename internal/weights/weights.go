package weights

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// Role says which cgroup of the kubelet's tree a weight target is.
type Role string

// Roles of weight targets.
const (
	RoleTier      Role = "tier"
	RolePod       Role = "pod"
	RoleContainer Role = "container"
)

// Target is one weight file and the value cgwarden holds it at.
type Target struct {
	// Path is the host path of the weight file (v1 cpu.shares, v2
	// cpu.weight).
	Path string `json:"path"`
	// Cgroup is the cgroup's path in its hierarchy.
	Cgroup string `json:"cgroup"`
	Value  uint64 `json:"value"`
	Role   Role   `json:"role"`
	// Pod and Container are the pod UID and container ID it is for
	// (empty for the tier).
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
	// MilliCPU is the size the value stands for: the pod's size, or the
	// sizes the tier counts.
	MilliCPU    int64  `json:"milliCPU"`
	Description string `json:"description"`
}

// Input is what the weight plan is computed from.
type Input struct {
	Node   *inventory.Node
	Places mounts.Places
	Meta   *metadata.Set
	// Pod narrows pod and container targets to one pod (UID, name or
	// namespace/name); the tier still counts every sized pod.
	Pod string
	// Pods and Tier say which targets to compute: the sized pods' and
	// their VM containers' (size-blind-weights), the BestEffort tier's
	// (besteffort-starvation).
	Pods, Tier bool
	// MaxTierMilliCPU caps the sizes the BestEffort tier's weight counts
	// (0: the node's CPUs). Sized VMs that together declare more than the
	// node has would otherwise outweigh every Burstable pod.
	MaxTierMilliCPU int64
}

// Plan is every target of the node's sized BestEffort pods.
type Plan struct {
	Targets []Target `json:"targets"`
	Notes   []string `json:"notes,omitempty"`
	Skipped []Skip   `json:"skipped,omitempty"`
}

// Skip is a pod whose declared size is not used, and why.
type Skip struct {
	Pod    string `json:"pod"`
	Reason string `json:"reason"`
}

func appendOnce(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// WeightFile is the name of the CPU weight file on a cgroup version.
func WeightFile(v2 bool) string {
	if v2 {
		return "cpu.weight"
	}
	return "cpu.shares"
}

// Targets computes what the kubelet would write if every sized
// BestEffort pod requested its declared size (metadata.DeclaredSize): the
// pod cgroup and its VM container get MilliCPUToShares(size) (on v2 the
// kubelet's linear conversion for the pod, the node's own conversion for
// the container), and the BestEffort tier gets 2 + the sum of its sized
// pods' shares — as the kubelet weighs the Burstable tier by the sum of its
// pods' requests. A tier with no sized pod left goes back to the kubelet's
// minimum when it weighs anything else. Pods without a size keep the
// kubelet's minimum; pods with requests are never targets.
func Targets(in Input) (*Plan, error) {
	wp := &Plan{Targets: []Target{}}
	n := in.Node
	wantPods, wantTier := in.Pods, in.Tier
	if !wantPods && !wantTier {
		return wp, nil
	}
	if n.KubeRoot == nil {
		wp.Notes = append(wp.Notes, "no kubepods hierarchy found: no weights to set")
		return wp, nil
	}
	if in.Meta == nil {
		wp.Notes = append(wp.Notes, "pod sizes unknown: weights need pod metadata (--pods, --metadata) and, for VM pods, --vms")
		return wp, nil
	}
	point := in.Places.CPU
	if in.Places.V2 {
		point = in.Places.Unified
	}
	selected, err := MatchPod(n, in.Pod)
	if err != nil {
		return nil, err
	}
	file := WeightFile(in.Places.V2)
	podWeight := func(shares uint64) uint64 {
		if in.Places.V2 {
			return fairness.SharesToWeightLinear(shares)
		}
		return shares
	}
	ctrWeight, formulaNote := containerConversion(n, in.Meta, in.Places.V2)
	// Host paths of the weight files, when the hierarchy's mount point is
	// known.
	target := func(c *inventory.Cgroup) string {
		if point == "" {
			return ""
		}
		return path.Join(point, c.Path, file)
	}

	type tierSum struct {
		tier          *inventory.Cgroup
		milli         int64
		shares        uint64
		sized, others int
	}
	var tiers []*tierSum
	tierOf := func(c *inventory.Cgroup) *tierSum {
		for _, t := range tiers {
			if t.tier == c {
				return t
			}
		}
		t := &tierSum{tier: c}
		tiers = append(tiers, t)
		return t
	}
	for _, p := range n.Pods {
		skip := func(why string) { wp.Skipped = append(wp.Skipped, Skip{Pod: p.UID, Reason: why}) }
		sz, sized, err := in.Meta.DeclaredSize(p.UID)
		c := p.Cgroup
		inTier := c != nil && c.Parent != nil && c.Parent.Identity.Kind == layout.QoSTier && c.Parent.Identity.QoS == layout.BestEffort
		if !inTier {
			if sized && p.QoS != layout.BestEffort {
				skip(fmt.Sprintf("declares %s (%s) but is %s: the kubelet weighs it from its requests", milliText(sz.MilliCPU), sz.Source, qosText(p.QoS)))
			}
			continue
		}
		t := tierOf(c.Parent)
		if err != nil {
			skip(err.Error() + ": left at the kubelet's weight")
			t.others++
			continue
		}
		if !sized {
			t.others++
			continue
		}
		shares := fairness.MilliCPUToShares(sz.MilliCPU)
		if sz.MilliCPU*fairness.DefaultShares/1000 > fairness.MaxShares {
			wp.Notes = appendOnce(wp.Notes, fmt.Sprintf("pod %s: its size %s weighs more than the kernel's maximum; held at %d shares", podName(p), milliText(sz.MilliCPU), fairness.MaxShares))
		}
		t.sized++
		t.milli += sz.MilliCPU
		t.shares += shares
		if !wantPods || !slices.Contains(selected, p) {
			continue
		}
		why := fmt.Sprintf("what the kubelet would write if the pod requested its %s size (%s)", sizeAdj(sz.MilliCPU), sz.Source)
		wp.Targets = append(wp.Targets, Target{Path: target(c), Cgroup: c.Path, Value: podWeight(shares), Role: RolePod,
			Pod: p.UID, MilliCPU: sz.MilliCPU, Description: fmt.Sprintf("pod %s (cgroup %s): %s", podName(p), c.Path, why)})
		vc, why2 := vmContainer(p, in.Meta, sz.Source)
		switch {
		case vc == nil:
			wp.Notes = appendOnce(wp.Notes, fmt.Sprintf("pod %s: %s; only the pod cgroup is weighted", podName(p), why2))
		case vc.Misplaced:
			skip(fmt.Sprintf("its VM container %s lives outside the pod (%s): adopt it first (misplaced-container), then its weight is set", short(vc.ID), vc.Cgroup.Path))
		default:
			wp.Targets = append(wp.Targets, Target{Path: target(vc.Cgroup), Cgroup: vc.Cgroup.Path, Value: ctrWeight(shares), Role: RoleContainer,
				Pod: p.UID, Container: vc.ID, MilliCPU: sz.MilliCPU, Description: fmt.Sprintf("VM container %s of pod %s: %s", short(vc.ID), podName(p), why)})
		}
	}
	if formulaNote != "" && slices.ContainsFunc(wp.Targets, func(t Target) bool { return t.Role == RoleContainer }) {
		wp.Notes = appendOnce(wp.Notes, formulaNote)
	}
	limit := in.MaxTierMilliCPU
	if limit <= 0 {
		limit = int64(n.CPUs) * 1000
	}
	// A BestEffort tier with no pod in it is not met above: it is found
	// among the kubelet's QoS tiers.
	for _, c := range n.KubeRoot.Children {
		if c.Identity.Kind == layout.QoSTier && c.Identity.QoS == layout.BestEffort {
			tierOf(c)
		}
	}
	minimum := podWeight(fairness.MinShares)
	for _, t := range tiers {
		if t.sized == 0 {
			// No sized pod left (the last one deleted, or its size
			// withdrawn): the tier goes back to the kubelet's minimum,
			// which is what the kubelet writes for it. Planned only
			// when it weighs something else (cgwarden raised it for pods
			// that are gone), so that a node without sized pods gets no
			// target; an unknown weight is left alone.
			if w := t.tier.Stats.CPU.Weight; wantTier && w != nil && *w != minimum {
				wp.Targets = append(wp.Targets, Target{Path: target(t.tier), Cgroup: t.tier.Path, Value: minimum, Role: RoleTier,
					Description: fmt.Sprintf("BestEffort tier %s: no sized pod left, back to the kubelet's minimum (it weighs %d)", t.tier.Path, *w)})
			}
			continue
		}
		if t.others > 0 {
			verb := "keep"
			if t.others == 1 {
				verb = "keeps"
			}
			wp.Notes = appendOnce(wp.Notes, fmt.Sprintf("%s: %s without a declared size %s the minimum weight, and so a sliver of the tier", t.tier.Path, plural(t.others, "BestEffort pod"), verb))
		}
		if !wantTier {
			continue
		}
		shares := t.shares
		counted := t.milli
		if limit > 0 && t.milli > limit {
			// The sized pods together declare more than the cap: the tier
			// weighs what the cap would request, and its pods keep their
			// proportions inside it.
			shares = fairness.MilliCPUToShares(limit)
			counted = limit
			wp.Notes = appendOnce(wp.Notes, fmt.Sprintf("%s: its sized pods declare %s together, more than the cap of %s (--max-tier-cpu, default the node's CPUs): the tier weighs what %s would request",
				t.tier.Path, milliText(t.milli), milliText(limit), milliText(limit)))
		}
		total := fairness.MinShares + shares
		if total > fairness.MaxShares {
			wp.Notes = appendOnce(wp.Notes, fmt.Sprintf("%s: %d shares is above the kernel's maximum; clamped to %d", t.tier.Path, total, fairness.MaxShares))
			total = fairness.MaxShares
		}
		wp.Targets = append(wp.Targets, Target{Path: target(t.tier), Cgroup: t.tier.Path, Value: podWeight(total), Role: RoleTier, MilliCPU: counted,
			Description: fmt.Sprintf("BestEffort tier %s: 2 + the shares of its %s (%s), as the kubelet weighs the Burstable tier by its pods' requests",
				t.tier.Path, plural(t.sized, "sized pod"), milliText(counted))})
	}
	return wp, nil
}

// containerConversion is how the node converts a container's shares to
// cpu.weight on v2: the runtime's formula (runc ≥ 1.3.2, crun ≥ 1.23) or
// the kubelet's linear one (older runtimes). It is read off the node's own
// containers that request CPU; unknown, the linear one is used and the
// returned note says so. On v1 shares are shares.
func containerConversion(n *inventory.Node, meta *metadata.Set, v2 bool) (func(uint64) uint64, string) {
	if !v2 {
		return func(s uint64) uint64 { return s }, ""
	}
	runtime, linear := 0, 0
	for _, p := range n.Pods {
		mp, ok := meta.Pod(p.UID)
		if !ok {
			continue
		}
		for _, c := range p.Containers {
			if c.Misplaced || c.Sandbox || c.Cgroup.Stats.CPU.Weight == nil {
				continue
			}
			for _, mc := range mp.Containers {
				if mc.ID != c.ID || mc.RequestMilliCPU == nil || *mc.RequestMilliCPU <= 0 {
					continue
				}
				s := fairness.MilliCPUToShares(*mc.RequestMilliCPU)
				w := *c.Cgroup.Stats.CPU.Weight
				lin, rt := fairness.SharesToWeightLinear(s), fairness.SharesToWeightRuntime(s)
				switch {
				case w == rt && rt != lin:
					runtime++
				case w == lin && rt != lin:
					linear++
				}
			}
		}
	}
	if runtime > linear {
		return fairness.SharesToWeightRuntime, ""
	}
	if linear > 0 {
		return fairness.SharesToWeightLinear, ""
	}
	return fairness.SharesToWeightLinear, "which shares→weight conversion this node's runtime uses for containers is unknown (no container with a CPU request tells): the VM containers get the kubelet's linear one, as their pods do"
}

// vmContainer picks the running container of a sized pod whose cgroup is
// weighted with the pod, by the size policy (vmsize.Container: the
// container the sizer sizes). Nil, with the reason, when none can be told.
func vmContainer(p *inventory.Pod, meta *metadata.Set, source string) (*inventory.Container, string) {
	mp, _ := meta.Pod(p.UID)
	var app []*inventory.Container
	var names []string
	for _, c := range p.Containers {
		if c.Sandbox || c.Leftover {
			continue
		}
		name := c.Name
		if name == "" && mp != nil {
			name = mp.ContainerName(c.ID)
		}
		app, names = append(app, c), append(names, name)
	}
	var ann map[string]string
	if mp != nil {
		ann = mp.Annotation
	}
	i, err := vmsize.Container(names, source, ann)
	if err != nil {
		if len(app) == 0 {
			return nil, "no container cgroup found"
		}
		return nil, "of the running containers: " + err.Error()
	}
	return app[i], ""
}

// MatchPod returns the pods --pod names (every pod when it is empty). A
// bare name two namespaces use is an error, not both pods.
func MatchPod(n *inventory.Node, pod string) ([]*inventory.Pod, error) {
	if pod == "" {
		return n.Pods, nil
	}
	var out []*inventory.Pod
	var names []string
	for _, p := range n.Pods {
		if pod == p.UID || p.Name != "" && (pod == p.Name || pod == p.Namespace+"/"+p.Name) {
			out = append(out, p)
			names = append(names, p.Namespace+"/"+p.Name+" ("+p.UID+")")
		}
	}
	switch len(out) {
	case 0:
		return nil, fmt.Errorf("--pod %s: no such pod on this node (pod names need pod metadata)", pod)
	case 1:
		return out, nil
	}
	return nil, fmt.Errorf("--pod %s matches more than one pod: %s; give namespace/name or the UID", pod, strings.Join(names, ", "))
}

func podName(p *inventory.Pod) string {
	if p.Name != "" {
		return p.Namespace + "/" + p.Name
	}
	return p.UID
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func qosText(q string) string {
	if q == "" {
		return "not BestEffort"
	}
	return q
}

// milliText writes a CPU size for people: "4 CPUs", "250m CPU".
func milliText(m int64) string {
	if m%1000 == 0 {
		return plural(int(m/1000), "CPU")
	}
	return strconv.FormatFloat(float64(m)/1000, 'f', -1, 64) + " CPUs"
}

// sizeAdj writes a size as an adjective: "4-CPU", "0.25-CPU".
func sizeAdj(m int64) string {
	return strconv.FormatFloat(float64(m)/1000, 'f', -1, 64) + "-CPU"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
