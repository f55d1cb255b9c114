package plan

import (
	"cmp"
	"fmt"
	"io"
	"strings"
)

// WriteText prints a plan in plain words, one numbered operation each
// with the exact path and value below it.
func WriteText(w io.Writer, p *Plan) error {
	var b strings.Builder
	switch len(p.Ops) {
	case 0:
		b.WriteString("Nothing to change.\n")
	case 1:
		b.WriteString("Plan: 1 operation.\n")
	default:
		fmt.Fprintf(&b, "Plan: %d operations.\n", len(p.Ops))
	}
	for i, op := range p.Ops {
		fmt.Fprintf(&b, "%3d. [%s] %s\n", i+1, op.Rule, op.Description)
		switch op.Kind {
		case Mkdir:
			fmt.Fprintf(&b, "     mkdir %s\n", op.Path)
		case Rmdir:
			fmt.Fprintf(&b, "     rmdir %s\n", op.Path)
		case Write:
			if op.Current != "" {
				fmt.Fprintf(&b, "     write %q to %s (now %q)\n", op.Value, op.Path, op.Current)
			} else {
				fmt.Fprintf(&b, "     write %q to %s\n", op.Value, op.Path)
			}
		case Property:
			fmt.Fprintf(&b, "     systemd: set %s=%s on unit %s (%s now %q)\n", op.Property, op.Value, op.Unit, op.File(), op.Current)
		case Move:
			for _, pr := range op.Pairs {
				fmt.Fprintf(&b, "     move %s/cgroup.procs -> %s/cgroup.procs\n", pr.Source, pr.Target)
			}
		}
	}
	if len(p.Skipped) > 0 {
		b.WriteString("Not repaired:\n")
		for _, s := range p.Skipped {
			fmt.Fprintf(&b, "  - pod %s container %s: %s\n", s.Pod, cmp.Or(s.Container, "-"), s.Reason)
		}
	}
	if len(p.Notes) > 0 {
		b.WriteString("Notes:\n")
		for _, n := range p.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
