package inspect

import (
	"encoding/json"
	"io"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/stats"
	"github.com/cgwarden/cgwarden/internal/weights"
)

// Report is the JSON form of `cgwarden inspect -o json`. The names in the
// DESIGN.md contract (node.cpus, node.cgroupVersion, node.driver, pods[].uid,
// qos, name, namespace, cgroup, cpu.weight, cpu.guaranteedCores,
// cpu.usageCores, containers[].id, runtime, cgroup, misplaced) are stable.
type Report struct {
	Node       NodeJSON   `json:"node"`
	Pods       []PodJSON  `json:"pods"`
	Unattached []CgroupJS `json:"unattached,omitempty"`
	// SizedPods are the BestEffort pods with a declared size (VMs,
	// sandboxes) and their weights by size.
	SizedPods []SizedJSON `json:"sizedPods,omitempty"`
	// ReadErrors counts files that existed but could not be read or
	// parsed; their fields are null.
	ReadErrors int `json:"readErrors"`
}

// NodeJSON describes the node.
type NodeJSON struct {
	CPUs          int    `json:"cpus"`
	CgroupVersion string `json:"cgroupVersion"`
	Hybrid        bool   `json:"hybrid,omitempty"`
	Driver        string `json:"driver"`
	KubeRoot      string `json:"kubeRoot"`
	Cgroups       int    `json:"cgroups"`
}

// CPUJSON is a cgroup's CPU view. Null means unknown.
type CPUJSON struct {
	Weight          *uint64  `json:"weight"`
	QuotaCores      *float64 `json:"quotaCores"`
	GuaranteedCores float64  `json:"guaranteedCores"`
	UsageCores      *float64 `json:"usageCores"`
	FairCores       *float64 `json:"fairCores,omitempty"`
	DemandCores     *float64 `json:"demandCores,omitempty"`
	ThrottledPeriod *uint64  `json:"throttledPeriods,omitempty"`
}

// MemoryJSON is a cgroup's memory view. LimitBytes is -1 for no limit.
type MemoryJSON struct {
	WorkingSetBytes *uint64 `json:"workingSetBytes"`
	UsageBytes      *uint64 `json:"usageBytes"`
	RSSBytes        *uint64 `json:"rssBytes"`
	LimitBytes      *int64  `json:"limitBytes"`
}

// PodJSON is one pod.
type PodJSON struct {
	UID        string          `json:"uid"`
	QoS        string          `json:"qos"`
	Name       string          `json:"name"`
	Namespace  string          `json:"namespace"`
	Cgroup     *string         `json:"cgroup"`
	CPU        *CPUJSON        `json:"cpu"`
	Memory     *MemoryJSON     `json:"memory"`
	Containers []ContainerJSON `json:"containers"`
}

// ContainerJSON is one container.
type ContainerJSON struct {
	ID        string `json:"id"`
	Name      string `json:"name,omitempty"`
	Runtime   string `json:"runtime"`
	Cgroup    string `json:"cgroup"`
	Misplaced bool   `json:"misplaced"`
	Sandbox   bool   `json:"sandbox,omitempty"`
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
	r := Report{Node: NodeJSON{CPUs: n.CPUs, CgroupVersion: "v1", Driver: string(n.Driver), Cgroups: n.Count}, Pods: []PodJSON{}, ReadErrors: len(n.Errors)}
	switch n.Version {
	case mounts.V2:
		r.Node.CgroupVersion = "v2"
	case mounts.Hybrid:
		r.Node.Hybrid = true
	}
	if n.KubeRoot != nil {
		r.Node.KubeRoot = n.KubeRoot.Path
	}
	for _, p := range n.Pods {
		pj := PodJSON{UID: p.UID, QoS: p.QoS, Name: p.Name, Namespace: p.Namespace, Containers: []ContainerJSON{}}
		if p.Cgroup != nil {
			path := p.Cgroup.Path
			cpu, mem := CPUOf(p.Cgroup), memoryOf(p.Cgroup)
			pj.Cgroup, pj.CPU, pj.Memory = &path, &cpu, &mem
		}
		for _, c := range p.Containers {
			pj.Containers = append(pj.Containers, ContainerJSON{
				ID: c.ID, Name: c.Name, Runtime: c.Runtime, Cgroup: c.Cgroup.Path, Misplaced: c.Misplaced,
				Sandbox: c.Sandbox, Leftover: c.Leftover, Shape: c.Cgroup.Identity.Shape, CPU: CPUOf(c.Cgroup), Memory: memoryOf(c.Cgroup),
			})
		}
		r.Pods = append(r.Pods, pj)
	}
	for _, c := range n.Unattached {
		r.Unattached = append(r.Unattached, CgroupJS{Cgroup: c.Path, Identity: c.Identity, CPU: CPUOf(c)})
	}
	return r
}

// WriteJSON writes the report, indented, with the sized pods' weights.
func WriteJSON(w io.Writer, n *inventory.Node, sized []weights.View) error {
	r := Build(n)
	if len(sized) > 0 {
		r.SizedPods = Sized(sized)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
