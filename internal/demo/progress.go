package demo

import (
	"fmt"
	"strings"
)

// say writes one line of what the demo is doing.
func (d *run) say(format string, a ...any) {
	if d.o.Progress == nil {
		return
	}
	fmt.Fprintf(d.o.Progress, "demo: "+format+"\n", a...)
}

// progressStart announces a measuring phase.
func (d *run) progressStart(name string) {
	if d.o.Progress != nil && !d.o.Live {
		fmt.Fprintf(d.o.Progress, "demo: measuring %q for %s\n", name, d.o.Duration)
	}
}

// progress shows the figures of a phase so far: on a terminal one status
// line rewritten in place, with a bar per pod; elsewhere nothing (the
// phase's line comes at its end).
func (d *run) progress(name string, ph Phase) {
	if d.o.Progress == nil || !d.o.Live {
		return
	}
	var parts []string
	if sp := ph.Seed000; sp != nil {
		for _, v := range sp.VMs {
			parts = append(parts, fmt.Sprintf("%s %s %.2f", v.Name, bar(v.Cores), v.Cores))
		}
		if !ph.BurstablePaused {
			parts = append(parts, fmt.Sprintf("app %s %.2f", bar(sp.BurstableCores), sp.BurstableCores))
		}
	}
	if pl := ph.Seed003; pl != nil {
		parts = append(parts, fmt.Sprintf("spin pod %s %.2f ctr %.2f", bar(pl.PodCores), pl.PodCores, pl.ContainerCores))
	}
	fmt.Fprintf(d.o.Progress, "\r\033[K%s %4.1fs  %s", name, ph.Seconds, strings.Join(parts, "  "))
}

// progressEnd ends the status line.
func (d *run) progressEnd() {
	if d.o.Progress != nil && d.o.Live {
		fmt.Fprint(d.o.Progress, "\r\033[K")
	}
}

// bar draws cores (0..1) as eight cells.
func bar(cores float64) string {
	n := int(cores*8 + 0.5)
	n = min(max(n, 0), 8)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", 8-n) + "]"
}
