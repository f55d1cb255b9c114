package report

import (
	"fmt"
	"path"
	"slices"
	"strconv"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/inspect"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/weights"
)

// Page is everything one report shows, already in words and numbers: the
// template only lays it out.
type Page struct {
	Title string
	// Source says where the figures come from (a snapshot, the live
	// host at a time, a demo run).
	Source   string
	Node     Node
	Findings []Finding
	// Notes are the audit's notes: checks it could not make.
	Notes  []string
	Pods   []PodRow
	Charts []Chart
	// Demo is the demo's before/after section; nil for a node report.
	Demo *Demo
}

// Node is the report's header.
type Node struct {
	CPUs          int
	CgroupVersion string
	Driver        string
	KubeRoot      string
	Cgroups       int
	Pods          int
	Errors        int
}

// Finding is one audit finding, in words.
type Finding struct {
	Severity, Rule, Subject, Summary, Message, Remedy string
	Evidence                                          []KV
}

// KV is a named figure.
type KV struct{ Name, Value string }

// PodRow is one pod of the tree, with its containers.
type PodRow struct {
	Name, UID, QoS, Cgroup string
	Weight, Guaranteed     string
	Used, Memory           string
	Containers             []ContainerRow
	// Problem marks a pod with a misplaced container.
	Problem bool
}

// ContainerRow is one container of a pod.
type ContainerRow struct {
	Name, Runtime, Cgroup, Weight, Used, Memory, Note string
	Problem                                           bool
}

// Build makes the report of a node: the header, the audit's findings,
// the pod tree and the charts (each tier's sized pods by weight against
// by size, guaranteed against used CPU per pod).
func Build(title, source string, n *inventory.Node, meta *metadata.Set, r audit.Report) Page {
	ins := inspect.Build(n)
	p := Page{Title: title, Source: source, Notes: r.Notes,
		Node: Node{CPUs: ins.Node.CPUs, CgroupVersion: ins.Node.CgroupVersion, Driver: str(ins.Node.Driver),
			KubeRoot: str(ins.Node.KubeRoot), Cgroups: ins.Node.Cgroups, Pods: len(ins.Pods), Errors: ins.ReadErrors}}
	if n.KubeRoot == nil {
		p.Notes = append([]string{"No kubepods hierarchy was found: this is not a Kubernetes node, or --host-root does not point at the host's /. There are no pods to show."}, p.Notes...)
	}
	if ins.Node.Hybrid {
		p.Node.CgroupVersion += " (hybrid)"
	}
	for _, f := range r.Findings {
		fd := Finding{Severity: string(f.Severity), Rule: f.Rule, Subject: f.Subject.String(), Summary: f.Evidence.Summary,
			Message: f.Message, Remedy: f.Remedy}
		for _, v := range f.Evidence.Values {
			fd.Evidence = append(fd.Evidence, KV{v.Name, fmt.Sprint(v.Value)})
		}
		p.Findings = append(p.Findings, fd)
	}
	for _, pj := range ins.Pods {
		row := PodRow{Name: podName(pj), UID: pj.UID, QoS: pj.QoS, Cgroup: "(none: only containers outside it)",
			Weight: "-", Guaranteed: "-", Used: "-", Memory: "-"}
		if pj.Cgroup != nil {
			row.Cgroup = *pj.Cgroup
		}
		if c := pj.CPU; c != nil {
			row.Weight, row.Guaranteed, row.Used = weight(c.Weight), cores(&c.GuaranteedCores), cores(c.UsageCores)
		}
		if m := pj.Memory; m != nil {
			row.Memory = bytes(m.WorkingSetBytes)
		}
		for _, c := range pj.Containers {
			cr := ContainerRow{Name: str(c.Name), Runtime: str(c.Runtime), Cgroup: c.Cgroup, Weight: weight(c.CPU.Weight),
				Used: cores(c.CPU.UsageCores), Memory: bytes(c.Memory.WorkingSetBytes)}
			if cr.Name == "" {
				cr.Name = layout.ShortID(c.ID)
			}
			switch {
			case c.Misplaced:
				cr.Note, cr.Problem, row.Problem = "outside its pod", true, true
			case c.Leftover:
				cr.Note = "leftover of a repaired container"
			case c.Sandbox:
				cr.Note = "sandbox"
			}
			row.Containers = append(row.Containers, cr)
		}
		p.Pods = append(p.Pods, row)
	}
	sized, _ := weights.Views(n, meta, 0)
	p.Charts = append(p.Charts, tierCharts(sized)...)
	if c, ok := guaranteedUsed(ins); ok {
		p.Charts = append(p.Charts, c)
	}
	return p
}

// tierCharts draws, for each tier holding sized pods, each pod's share
// of the tier's CPU by its weight now against by its size.
func tierCharts(views []weights.View) []Chart {
	byTier := map[string][]weights.View{}
	var tiers []string
	for _, v := range views {
		if v.Pod.Cgroup == nil {
			continue
		}
		t := path.Dir(v.Pod.Cgroup.Path)
		if _, ok := byTier[t]; !ok {
			tiers = append(tiers, t)
		}
		byTier[t] = append(byTier[t], v)
	}
	slices.Sort(tiers)
	var out []Chart
	for i, t := range tiers {
		vs := byTier[t]
		var sumW, sumSize float64
		for _, v := range vs {
			if v.Weight != nil {
				sumW += float64(*v.Weight)
			}
			sumSize += float64(v.MilliCPU)
		}
		c := Chart{ID: "tier-" + strconv.Itoa(i), Title: "CPU split of the sized pods in " + t + ": by weight now and by size",
			Desc: "For each pod with a declared size (VM or sandbox) in this tier, the part of the tier's CPU its weight gives it " +
				"under full contention, next to the part its size says it should get.",
			Unit: "%", Series: []string{"by weight now", "by size"}}
		for _, v := range vs {
			w := 0.0
			if v.Weight != nil && sumW > 0 {
				w = 100 * float64(*v.Weight) / sumW
			}
			c.Groups = append(c.Groups, Group{Label: podLabel(v.Pod) + " (" + cpuSize(v.MilliCPU) + ")",
				Values: []float64{w, 100 * float64(v.MilliCPU) / sumSize}})
		}
		out = append(out, c.layout())
	}
	return out
}

// guaranteedUsed draws each pod's guaranteed CPU against its usage.
func guaranteedUsed(ins inspect.Report) (Chart, bool) {
	c := Chart{ID: "guaranteed-used", Title: "Guaranteed and used CPU per pod (cores)",
		Desc: "For each pod, the CPU its cgroup's weights guarantee it when every CPU is busy, next to the CPU its own cgroup " +
			"used over the sampling interval. A pod whose own cgroup shows no use while its containers run elsewhere is misplaced.",
		Unit: "cores", Series: []string{"guaranteed", "used"}}
	any := false
	for _, p := range ins.Pods {
		if p.CPU == nil {
			continue
		}
		used := 0.0
		if p.CPU.UsageCores != nil {
			used, any = *p.CPU.UsageCores, true
		}
		c.Groups = append(c.Groups, Group{Label: podName(p), Values: []float64{p.CPU.GuaranteedCores, used}})
	}
	if len(c.Groups) == 0 {
		return c, false
	}
	if !any {
		c.Series = c.Series[:1]
		for i := range c.Groups {
			c.Groups[i].Values = c.Groups[i].Values[:1]
		}
		c.Title = "Guaranteed CPU per pod (cores; one sample: no usage)"
	}
	return c.layout(), true
}

func podName(p inspect.PodJSON) string { return label(str(p.Name), str(p.Namespace), p.UID) }

func label(name, namespace, uid string) string {
	if name == "" {
		return "pod " + layout.ShortID(uid)
	}
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

func podLabel(p *inventory.Pod) string { return label(p.Name, p.Namespace, p.UID) }

// str reads an optional string of the JSON views ("" when absent).
func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func weight(w *uint64) string {
	if w == nil {
		return "unknown"
	}
	return strconv.FormatUint(*w, 10)
}

func cores(c *float64) string {
	if c == nil {
		return "-"
	}
	return strconv.FormatFloat(*c, 'f', 3, 64)
}

func bytes(b *uint64) string {
	if b == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f MiB", float64(*b)/(1<<20))
}

func cpuSize(milli int64) string {
	if milli%1000 == 0 {
		n := milli / 1000
		if n == 1 {
			return "1 CPU"
		}
		return fmt.Sprintf("%d CPUs", n)
	}
	return fmt.Sprintf("%dm", milli)
}
