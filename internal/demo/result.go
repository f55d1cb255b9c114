package demo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// Result is everything a demo run measured: the JSON of `cgwarden demo
// -o json`.
type Result struct {
	Scratch       string   `json:"scratch"`
	CgroupVersion string   `json:"cgroupVersion"`
	Driver        string   `json:"driver"`
	CPUs          int      `json:"cpus"`
	Seeds         []string `json:"seeds"`
	// PhaseSeconds is the --duration of each phase.
	PhaseSeconds float64 `json:"phaseSeconds"`
	Pods         []Pod   `json:"pods"`
	// Phases are "before", "before, Burstable pod paused" (seed 000) and
	// "after", in that order; a run cut short has fewer.
	Phases         []Phase         `json:"phases"`
	FindingsBefore []audit.Finding `json:"findingsBefore"`
	FindingsAfter  []audit.Finding `json:"findingsAfter"`
	Fix            []FixStep       `json:"fix"`
	Revert         RevertSummary   `json:"revert"`
	// Removed says the scratch cgroup is gone at the end.
	Removed bool `json:"removed"`

	nodeBefore, nodeAfter *inventory.Node
	meta                  *metadata.Set
}

// Phase is what the pods got over one measuring window.
type Phase struct {
	Name            string     `json:"name"`
	Seconds         float64    `json:"seconds"`
	BurstablePaused bool       `json:"burstablePaused,omitempty"`
	Seed000         *Split     `json:"seed000,omitempty"`
	Seed003         *Placement `json:"seed003,omitempty"`
}

// Split is seed 000's figures: how the VM pods and the Burstable pod
// split the one CPU their burners share.
type Split struct {
	VMs            []VMFigure `json:"vms"`
	BurstableCores float64    `json:"burstableCores"`
	// VMShare is the VM pods' part of all the CPU the pods got;
	// PromisedVMShare what the tiers' weights promise them (1 with the
	// Burstable pod paused).
	VMShare             float64 `json:"vmShare"`
	PromisedVMShare     float64 `json:"promisedVMShare"`
	TierWeight          uint64  `json:"bestEffortTierWeight"`
	BurstableTierWeight uint64  `json:"burstableTierWeight"`
}

// VMFigure is one VM pod in a phase.
type VMFigure struct {
	Name      string  `json:"name"`
	SizeCores float64 `json:"sizeCores"`
	PodWeight uint64  `json:"podWeight"`
	Cores     float64 `json:"cores"`
	// ShareOfVMs is the pod's part of the VM pods' CPU; ShareBySize and
	// ShareEqual what it would be split by size and equally; PerSize and
	// PerEqual the ratios (1: exactly so).
	ShareOfVMs  float64 `json:"shareOfVMs"`
	ShareBySize float64 `json:"shareBySize"`
	ShareEqual  float64 `json:"shareEqual"`
	PerSize     float64 `json:"perSize"`
	PerEqual    float64 `json:"perEqual"`
}

// Placement is seed 003's figures: the pod's own cgroup against the
// cgroup its container's processes are in.
type Placement struct {
	PodCores             float64 `json:"podCores"`
	ContainerCores       float64 `json:"containerCores"`
	ContainerCgroup      string  `json:"containerCgroup"`
	Misplaced            bool    `json:"misplaced"`
	MisplacedCgroup      string  `json:"misplacedCgroup"`
	MisplacedCores       float64 `json:"misplacedCores"`
	MisplacedProcs       int     `json:"misplacedProcs"`
	PodMemoryBytes       uint64  `json:"podMemoryBytes"`
	MisplacedMemoryBytes uint64  `json:"misplacedMemoryBytes"`
}

// FixStep is one operation the fix applied.
type FixStep struct {
	Rule        string `json:"rule"`
	Description string `json:"description"`
	Note        string `json:"note,omitempty"`
	Moved       int    `json:"moved,omitempty"`
}

// RevertSummary is what the revert did.
type RevertSummary struct {
	Undone int      `json:"undone"`
	Failed []string `json:"failed,omitempty"`
}

// Phase returns the phase of that name, or nil.
func (r *Result) Phase(name string) *Phase {
	for i := range r.Phases {
		if r.Phases[i].Name == name {
			return &r.Phases[i]
		}
	}
	return nil
}

// NodeBefore and NodeAfter are the scans of the scratch at the end of the
// before and after phases (with CPU rates over the phase); nil when the
// run did not get there.
func (r *Result) NodeBefore() *inventory.Node { return r.nodeBefore }

// NodeAfter: see NodeBefore.
func (r *Result) NodeAfter() *inventory.Node { return r.nodeAfter }

// Meta is the demo's pod metadata (the VM pods' sizes among it).
func (r *Result) Meta() *metadata.Set { return r.meta }

// Line is a phase's figures in one line.
func (p Phase) Line() string {
	var parts []string
	if sp := p.Seed000; sp != nil {
		var vm []string
		for _, v := range sp.VMs {
			vm = append(vm, fmt.Sprintf("%s %.3f", v.Name, v.Cores))
		}
		parts = append(parts, fmt.Sprintf("VM pods %.1f%% of the CPU (%s cores), Burstable %.3f", 100*sp.VMShare, strings.Join(vm, ", "), sp.BurstableCores))
	}
	if pl := p.Seed003; pl != nil {
		parts = append(parts, fmt.Sprintf("spin-app pod cgroup %.3f cores, its container %.3f", pl.PodCores, pl.ContainerCores))
	}
	return p.Name + ": " + strings.Join(parts, "; ")
}

// WriteText writes the before/after table and the findings.
func (r *Result) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	before, paused, after := r.Phase(PhaseBefore), r.Phase(PhasePaused), r.Phase(PhaseAfter)
	fmt.Fprintf(tw, "cgwarden demo on cgroup %s, %d CPUs, %.0f s per phase (scratch %s, %s driver's names)\n\n", r.CgroupVersion, r.CPUs, r.PhaseSeconds, r.Scratch, r.Driver)
	cell := func(p *Phase, f func(*Phase) string) string {
		if p == nil {
			return "-"
		}
		return f(p)
	}
	if before != nil && before.Seed000 != nil {
		fmt.Fprintln(tw, "seed 000: VM pods sized 1, 2, 4 CPUs (BestEffort) beside a Burstable pod requesting 500m, all on one CPU")
		fmt.Fprintln(tw, "\tbefore\tbefore, Burstable paused\tafter\tby size")
		// row writes a figure in each phase, and what the sizes call for.
		row := func(name string, f func(*Phase) string, bySize string) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, cell(before, f), cell(paused, f), cell(after, f), bySize)
		}
		row("VM pods' share of the CPU", func(p *Phase) string { return pct(p.Seed000.VMShare) }, fmt.Sprintf("%.1f%%", 700/7.5))
		row("  (the weights promise)", func(p *Phase) string { return pct(p.Seed000.PromisedVMShare) }, "")
		for i, v := range before.Seed000.VMs {
			row(v.Name, func(p *Phase) string {
				if p.Seed000 == nil || i >= len(p.Seed000.VMs) {
					return "-"
				}
				x := p.Seed000.VMs[i]
				return fmt.Sprintf("%.3f cores, %s of VMs (w %d)", x.Cores, pct(x.ShareOfVMs), x.PodWeight)
			}, pct(v.ShareBySize))
		}
		row("Burstable pod app (500m)", func(p *Phase) string {
			if p == paused {
				return "paused"
			}
			return fmt.Sprintf("%.3f cores", p.Seed000.BurstableCores)
		}, "")
		row("BestEffort tier weight", func(p *Phase) string { return fmt.Sprint(p.Seed000.TierWeight) }, "")
		fmt.Fprintln(tw)
	}
	if before != nil && before.Seed003 != nil {
		fmt.Fprintln(tw, "seed 003: container cgroup put outside its pod by the runtime (a burner and a 64 MiB memory user)")
		fmt.Fprintln(tw, "\tbefore\tafter\t")
		pl := func(p *Phase, f func(*Placement) string) string {
			if p == nil || p.Seed003 == nil {
				return "-"
			}
			return f(p.Seed003)
		}
		fmt.Fprintf(tw, "pod's own cgroup CPU\t%s\t%s\t\n", pl(before, func(x *Placement) string { return fmt.Sprintf("%.3f cores", x.PodCores) }), pl(after, func(x *Placement) string { return fmt.Sprintf("%.3f cores", x.PodCores) }))
		fmt.Fprintf(tw, "container CPU\t%s\t%s\t\n", pl(before, func(x *Placement) string { return fmt.Sprintf("%.3f cores", x.ContainerCores) }), pl(after, func(x *Placement) string { return fmt.Sprintf("%.3f cores", x.ContainerCores) }))
		fmt.Fprintf(tw, "container cgroup\t%s\t%s\t\n", pl(before, where), pl(after, where))
		fmt.Fprintf(tw, "processes in the runtime's directory\t%s\t%s\t\n", pl(before, func(x *Placement) string { return fmt.Sprint(x.MisplacedProcs) }), pl(after, func(x *Placement) string { return fmt.Sprint(x.MisplacedProcs) }))
		fmt.Fprintf(tw, "pod's own cgroup memory\t%s\t%s\t\n", pl(before, func(x *Placement) string { return mib(x.PodMemoryBytes) }), pl(after, func(x *Placement) string { return mib(x.PodMemoryBytes) }))
		fmt.Fprintf(tw, "memory charged to the runtime's directory\t%s\t%s\t\n", pl(before, func(x *Placement) string { return mib(x.MisplacedMemoryBytes) }), pl(after, func(x *Placement) string { return mib(x.MisplacedMemoryBytes) }))
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "  runtime's directory: %s\n", before.Seed003.MisplacedCgroup)
		if after != nil && after.Seed003 != nil {
			fmt.Fprintf(tw, "  after the fix:       %s\n", after.Seed003.ContainerCgroup)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "audit before the fix: %d findings\n", len(r.FindingsBefore))
	for _, f := range r.FindingsBefore {
		fmt.Fprintf(w, "  %-7s %-24s %s: %s\n", f.Severity, f.Rule, f.Subject, f.Evidence.Summary)
	}
	fmt.Fprintf(w, "fix: %d operations applied; audit after: %d findings", len(r.Fix), len(r.FindingsAfter))
	var rules []string
	for _, f := range r.FindingsAfter {
		rules = append(rules, f.Rule)
	}
	if len(rules) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(rules, ", "))
	}
	fmt.Fprintf(w, "\nrevert: %d operations undone", r.Revert.Undone)
	if len(r.Revert.Failed) > 0 {
		fmt.Fprintf(w, ", %d not undone: %s", len(r.Revert.Failed), strings.Join(r.Revert.Failed, "; "))
	}
	removed := "removed"
	if !r.Removed {
		removed = "NOT removed"
	}
	_, err := fmt.Fprintf(w, "\nscratch cgroup %s %s\n", r.Scratch, removed)
	return err
}

// The phase names.
const (
	PhaseBefore = "before"
	PhasePaused = "before, Burstable pod paused"
	PhaseAfter  = "after"
)

func where(x *Placement) string {
	if x.Misplaced {
		return "outside the pod"
	}
	return "inside the pod"
}

func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
