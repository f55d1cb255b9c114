package inspect

import (
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/stats"
	"github.com/cgwarden/cgwarden/internal/weights"
)

// Report is the JSON form of `cgwarden inspect -o json` (and -o yaml);
// docs/schemas/inspect.schema.json describes it. The names in the
// DESIGN.md contract (node.cpus, node.cgroupVersion, node.driver, pods[].uid,
// qos, name, namespace, cgroup, cpu.weight, cpu.guaranteedCores,
// cpu.usageCores, containers[].id, runtime, cgroup, misplaced) are stable.
//
// The same names mean the same things in every command's JSON: a pod's
// own object has uid, name and namespace, a container's id and name; an
// object that refers to a pod or container (an audit finding's subject)
// says podUID, podName, namespace, containerID and containerName. Unknown
// is null (a name without pod metadata, a file that could not be read);
// absent is left out; unlimited is -1 (quotaCores, limitBytes).
type Report struct {
	Node       NodeJSON   `json:"node"`
	Pods       []PodJSON  `json:"pods"`
	Unattached []CgroupJS `json:"unattached,omitempty"`
	// Foreign are cgroups named like a pod's misplaced container whose ID
	// the pod's metadata does not list: attached to no pod, never moved.
	Foreign []CgroupJS `json:"foreign,omitempty"`
	// SizedPods are the BestEffort pods with a declared size (VMs,
	// sandboxes) and their weights by size.
	SizedPods []SizedJSON `json:"sizedPods,omitempty"`
	// ReadErrors counts files that existed but could not be read or
	// parsed; their fields are null.
	ReadErrors int `json:"readErrors"`
}

// NodeJSON describes the node.
// Driver and KubeRoot are null on a node without a kubepods hierarchy.
// ContainerRuntimeVersion is what the Node object says
// (status.nodeInfo.containerRuntimeVersion), absent when unknown; only
// the audit's header carries it (audit.JSON), the cgroups cannot tell it.
type NodeJSON struct {
	CPUs                    int     `json:"cpus"`
	CgroupVersion           string  `json:"cgroupVersion"`
	Hybrid                  bool    `json:"hybrid,omitempty"`
	Driver                  *string `json:"driver"`
	KubeRoot                *string `json:"kubeRoot"`
	ContainerRuntimeVersion string  `json:"containerRuntimeVersion,omitempty"`
	Cgroups                 int     `json:"cgroups"`
	Pods                    int     `json:"pods"`
}

// NodeOf is the node header of inspect's and audit's JSON.
func NodeOf(n *inventory.Node) NodeJSON {
	j := NodeJSON{CPUs: n.CPUs, CgroupVersion: "v1", Cgroups: n.Cgroups, Pods: len(n.Pods)}
	switch n.Version {
	case mounts.V2:
		j.CgroupVersion = "v2"
	case mounts.Hybrid:
		j.Hybrid = true
	}
	if n.KubeRoot != nil {
		root, driver := n.KubeRoot.Path, string(n.Driver)
		j.KubeRoot = &root
		if driver != "" {
			j.Driver = &driver
		}
	}
	return j
}

// CPUJSON is a cgroup's CPU view. Null means unknown; quotaCores is -1
// for no quota. QuotaCappedCores is set when a CPU quota (the cgroup's
// own or a parent's) allows fewer cores than GuaranteedCores.
type CPUJSON struct {
	Weight           *uint64  `json:"weight"`
	QuotaCores       *float64 `json:"quotaCores"`
	GuaranteedCores  float64  `json:"guaranteedCores"`
	QuotaCappedCores *float64 `json:"quotaCappedCores,omitempty"`
	UsageCores       *float64 `json:"usageCores"`
	FairCores        *float64 `json:"fairCores,omitempty"`
	DemandCores      *float64 `json:"demandCores,omitempty"`
	ThrottledPeriod  *uint64  `json:"throttledPeriods,omitempty"`
}

// MemoryJSON is a cgroup's memory view. LimitBytes is -1 for no limit.
type MemoryJSON struct {
	WorkingSetBytes *uint64 `json:"workingSetBytes"`
	UsageBytes      *uint64 `json:"usageBytes"`
	RSSBytes        *uint64 `json:"rssBytes"`
	LimitBytes      *int64  `json:"limitBytes"`
}

// PodJSON is one pod.
// Name and Namespace are null without pod metadata.
type PodJSON struct {
	UID        string          `json:"uid"`
	QoS        string          `json:"qos"`
	Name       *string         `json:"name"`
	Namespace  *string         `json:"namespace"`
	Cgroup     *string         `json:"cgroup"`
	CPU        *CPUJSON        `json:"cpu"`
	Memory     *MemoryJSON     `json:"memory"`
	Containers []ContainerJSON `json:"containers"`
}

// ContainerJSON is one container. Name is null when unknown (no pod
// metadata, or a sandbox, which kubectl does not list); Runtime is null
// when neither the cgroup's name nor the metadata says it.
type ContainerJSON struct {
	ID        string  `json:"id"`
	Name      *string `json:"name"`
	Runtime   *string `json:"runtime"`
	Cgroup    string  `json:"cgroup"`
	Misplaced bool    `json:"misplaced"`
	Sandbox   bool    `json:"sandbox,omitempty"`
	// Leftover marks the empty directory a runtime keeps after cgwarden
	// moved the container's processes under the pod.
	Leftover bool       `json:"leftover,omitempty"`
	Shape    string     `json:"shape,omitempty"`
	CPU      CPUJSON    `json:"cpu"`
	Memory   MemoryJSON `json:"memory"`
}

// CgroupJS is a cgroup that could not be attached to a pod.
type CgroupJS struct {
	Cgroup   string          `json:"cgroup"`
	Identity layout.Identity `json:"identity"`
	CPU      CPUJSON         `json:"cpu"`
}

// CPUOf builds the CPU view of a cgroup.
func CPUOf(c *inventory.Cgroup) CPUJSON {
	j := CPUJSON{Weight: c.Stats.CPU.Weight, GuaranteedCores: c.GuaranteedCores, UsageCores: c.UsageCores, FairCores: c.FairCores, DemandCores: c.DemandCores, ThrottledPeriod: c.Stats.CPU.Throttled}
	j.QuotaCores = QuotaCores(c.Stats.CPU)
	if lim := QuotaCap(c); lim != nil && *lim < c.GuaranteedCores {
		j.QuotaCappedCores = lim
	}
	return j
}

// QuotaCores is quota/period in cores; -1 for no quota; nil when unknown.
func QuotaCores(c stats.CPU) *float64 {
	if c.QuotaUs == nil {
		return nil
	}
	v := -1.0
	if *c.QuotaUs != stats.Unlimited && c.PeriodUs != nil && *c.PeriodUs > 0 {
		v = float64(*c.QuotaUs) / float64(*c.PeriodUs)
	}
	return &v
}

func memoryOf(c *inventory.Cgroup) MemoryJSON {
	m := c.Stats.Memory
	return MemoryJSON{WorkingSetBytes: m.WorkingSetBytes, UsageBytes: m.UsageBytes, RSSBytes: m.RSSBytes, LimitBytes: m.LimitBytes}
}

// Build turns a node into its JSON report.
func Build(n *inventory.Node) Report {
	r := Report{Node: NodeOf(n), Pods: []PodJSON{}, ReadErrors: len(n.Errors)}
	for _, p := range n.Pods {
		pj := PodJSON{UID: p.UID, QoS: p.QoS, Name: known(p.Name), Namespace: known(p.Namespace), Containers: []ContainerJSON{}}
		if p.Cgroup != nil {
			path := p.Cgroup.Path
			cpu, mem := CPUOf(p.Cgroup), memoryOf(p.Cgroup)
			pj.Cgroup, pj.CPU, pj.Memory = &path, &cpu, &mem
		}
		for _, c := range p.Containers {
			pj.Containers = append(pj.Containers, ContainerJSON{
				ID: c.ID, Name: known(c.Name), Runtime: known(c.Runtime), Cgroup: c.Cgroup.Path, Misplaced: c.Misplaced,
				Sandbox: IsSandbox(p, c), Leftover: c.Leftover, Shape: c.Cgroup.Identity.Shape, CPU: CPUOf(c.Cgroup), Memory: memoryOf(c.Cgroup),
			})
		}
		r.Pods = append(r.Pods, pj)
	}
	for _, c := range n.Unattached {
		r.Unattached = append(r.Unattached, CgroupJS{Cgroup: c.Path, Identity: c.Identity, CPU: CPUOf(c)})
	}
	for _, c := range n.Foreign {
		r.Foreign = append(r.Foreign, CgroupJS{Cgroup: c.Path, Identity: c.Identity, CPU: CPUOf(c)})
	}
	return r
}

// known is s, or nil (null) when s is empty: unknown.
func known(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// NewReport is the node's report with the sized pods' weights.
func NewReport(n *inventory.Node, sized []weights.View) Report {
	r := Build(n)
	if len(sized) > 0 {
		r.SizedPods = Sized(sized)
	}
	return r
}
