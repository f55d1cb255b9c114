package report

import (
	"fmt"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/demo"
)

// Demo is the before/after part of a demo report.
type Demo struct {
	Summary string
	// Table is the before/after figures, one row per figure.
	Columns []string
	Rows    [][]string
	Fix     []string
	Revert  string
	Removed bool
}

// FromDemo makes the report of a demo run: its scratch node as scanned
// before the fix (header, findings, pod tree, charts) and the before and
// after figures as bars and a table.
func FromDemo(r *demo.Result) Page {
	var p Page
	title := "cgwarden demo"
	source := fmt.Sprintf("a demo run on cgroup %s, %d CPUs, %.0f s per phase, in the scratch cgroup %s", r.CgroupVersion, r.CPUs, r.PhaseSeconds, r.Scratch)
	if n := r.NodeBefore(); n != nil {
		p = Build(title, source, n, r.Meta(), audit.Report{Findings: r.FindingsBefore})
	} else {
		p = Page{Title: title, Source: source}
	}
	d := &Demo{Removed: r.Removed, Revert: fmt.Sprintf("%d operations undone", r.Revert.Undone)}
	if len(r.Revert.Failed) > 0 {
		d.Revert += fmt.Sprintf(", %d not undone", len(r.Revert.Failed))
	}
	for _, s := range r.Fix {
		line := s.Description
		if s.Note != "" {
			line += " (" + s.Note + ")"
		}
		d.Fix = append(d.Fix, line)
	}
	before, paused, after := r.Phase(demo.PhaseBefore), r.Phase(demo.PhasePaused), r.Phase(demo.PhaseAfter)
	d.Columns = []string{"figure", "before", "after"}
	row := func(name string, f func(*demo.Phase) string) {
		cell := func(ph *demo.Phase) string {
			if ph == nil {
				return "-"
			}
			return f(ph)
		}
		d.Rows = append(d.Rows, []string{name, cell(before), cell(after)})
	}
	var charts []Chart
	if before != nil && before.Seed000 != nil {
		row("VM pods' share of the CPU against the Burstable pod", func(ph *demo.Phase) string { return pctS(ph.Seed000.VMShare) })
		row("  what the tiers' weights promise", func(ph *demo.Phase) string { return pctS(ph.Seed000.PromisedVMShare) })
		c := Chart{ID: "demo-vm-share", Title: "Seed 000: the VM pods' share of one CPU against a Burstable pod requesting 500m",
			Desc: "Measured share of the CPU the three VM pods (1, 2 and 4 CPUs) got together, before and after the fix, next to what the tiers' weights promise.",
			Unit: "%", Series: []string{"measured", "weights promise"}}
		for _, ph := range []*demo.Phase{before, after} {
			if ph != nil && ph.Seed000 != nil {
				c.Groups = append(c.Groups, Group{Label: ph.Name, Values: []float64{100 * ph.Seed000.VMShare, 100 * ph.Seed000.PromisedVMShare}})
			}
		}
		charts = append(charts, c.layout())
		split := Chart{ID: "demo-vm-split", Title: "Seed 000: each VM pod's part of the VM pods' CPU",
			Desc: "Before the fix measured with the Burstable pod paused (otherwise the VM pods get too little to tell a split); after the fix with it running; and the split their sizes call for.",
			Unit: "%", Series: []string{"before (Burstable paused)", "after", "by size"}}
		for i, v := range before.Seed000.VMs {
			g := Group{Label: fmt.Sprintf("%s (%g CPU)", v.Name, v.SizeCores)}
			for _, ph := range []*demo.Phase{paused, after} {
				val := 0.0
				if ph != nil && ph.Seed000 != nil && i < len(ph.Seed000.VMs) {
					val = 100 * ph.Seed000.VMs[i].ShareOfVMs
				}
				g.Values = append(g.Values, val)
			}
			g.Values = append(g.Values, 100*v.ShareBySize)
			split.Groups = append(split.Groups, g)
			d.Rows = append(d.Rows, []string{v.Name + " (" + fmt.Sprint(v.SizeCores) + " CPU): part of the VM pods' CPU",
				vmCell(paused, i) + " (Burstable paused)", vmCell(after, i)})
		}
		charts = append(charts, split.layout())
		row("BestEffort tier weight", func(ph *demo.Phase) string { return fmt.Sprint(ph.Seed000.TierWeight) })
	}
	if before != nil && before.Seed003 != nil {
		row("seed 003: pod's own cgroup CPU (cores)", func(ph *demo.Phase) string {
			return placement(ph, func(x *demo.Placement) float64 { return x.PodCores })
		})
		row("seed 003: its container's CPU (cores)", func(ph *demo.Phase) string {
			return placement(ph, func(x *demo.Placement) float64 { return x.ContainerCores })
		})
		row("seed 003: processes left in the runtime's directory", func(ph *demo.Phase) string {
			if ph.Seed003 == nil {
				return "-"
			}
			return fmt.Sprint(ph.Seed003.MisplacedProcs)
		})
		c := Chart{ID: "demo-placement", Title: "Seed 003: the pod's own cgroup against its container (cores)",
			Desc: "CPU the kubelet reads for the pod (its own cgroup) next to the CPU its container really used, before and after the fix moved the container under the pod.",
			Unit: "cores", Series: []string{"pod's own cgroup", "container"}}
		for _, ph := range []*demo.Phase{before, after} {
			if ph != nil && ph.Seed003 != nil {
				c.Groups = append(c.Groups, Group{Label: ph.Name, Values: []float64{ph.Seed003.PodCores, ph.Seed003.ContainerCores}})
			}
		}
		charts = append(charts, c.layout())
	}
	d.Summary = fmt.Sprintf("audit found %d problems before the fix and %d after; the fix applied %d operations; revert: %s.",
		len(r.FindingsBefore), len(r.FindingsAfter), len(r.Fix), d.Revert)
	p.Demo = d
	p.Charts = append(charts, p.Charts...)
	return p
}

func vmCell(ph *demo.Phase, i int) string {
	if ph == nil || ph.Seed000 == nil || i >= len(ph.Seed000.VMs) {
		return "-"
	}
	v := ph.Seed000.VMs[i]
	return fmt.Sprintf("%s (%.3f cores)", pctS(v.ShareOfVMs), v.Cores)
}

func placement(ph *demo.Phase, f func(*demo.Placement) float64) string {
	if ph.Seed003 == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", f(ph.Seed003))
}

func pctS(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }
