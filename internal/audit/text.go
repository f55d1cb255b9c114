package audit

import (
	"cmp"
	"fmt"
	"io"
	"strings"

	"github.com/cgwarden/cgwarden/internal/inspect"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/mounts"
)

// textWidth is where the human output wraps.
const textWidth = 100

// WriteText writes the findings for people: a header line, then one
// section per severity, the findings of each subject together under it;
// each finding's consequence, its evidence and its remedy (a remedy already
// printed is not repeated). Notes on what could not be checked come last.
// Container IDs are cut to 12 characters; the JSON output keeps them whole.
func WriteText(w io.Writer, n *inventory.Node, r *Report) error {
	var b strings.Builder
	ver := string(n.Version)
	if n.Version == mounts.Hybrid {
		ver = "v1 (hybrid)"
	}
	count := r.count()
	kube := "no kubepods hierarchy"
	if n.KubeRoot != nil {
		kube = string(n.Driver) + " driver"
	}
	fmt.Fprintf(&b, "node: %d CPUs, cgroup %s, %s, %d pods — %s\n", n.CPUs, ver, kube, len(n.Pods), tally(count))
	if len(n.Errors) > 0 {
		fmt.Fprintf(&b, "warning: %d cgroup files could not be read; figures that need them are unknown\n", len(n.Errors))
	}
	seenRemedy := map[string]bool{}
	// A rule is explained in full the first time it appears in a
	// severity; later findings of it take one line, so that a node with
	// thirty starved VMs still fits on a screen (-o json has everything).
	explained := map[string]bool{}
	for _, sev := range severities {
		var subjects []string
		group := map[string][]Finding{}
		for _, f := range r.Findings {
			if f.Severity != sev {
				continue
			}
			key := f.Subject.String()
			if _, ok := group[key]; !ok {
				subjects = append(subjects, key)
			}
			group[key] = append(group[key], f)
		}
		if len(subjects) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s\n", strings.ToUpper(string(sev))+"S")
		for _, s := range subjects {
			fmt.Fprintf(&b, "\n● %s\n", s)
			for _, f := range group[s] {
				key := string(f.Severity) + "/" + f.Rule
				if explained[key] {
					wrap(&b, "  "+f.Rule+": ", "    ", inspect.ShortIDs(cmp.Or(f.Brief, f.Evidence.Summary))+" (as above)")
					continue
				}
				explained[key] = true
				wrap(&b, "  "+f.Rule+": ", "    ", inspect.ShortIDs(f.Message))
				wrap(&b, "    evidence: ", "      ", inspect.ShortIDs(f.Evidence.Summary))
				if seenRemedy[f.Remedy] {
					wrap(&b, "    fix: ", "      ", "as for "+f.Rule+" above.")
				} else {
					wrap(&b, "    fix: ", "      ", inspect.ShortIDs(f.Remedy))
					seenRemedy[f.Remedy] = true
				}
			}
		}
	}
	if len(r.Findings) == 0 {
		b.WriteString("\nNo findings.\n")
	}
	writeSizes(&b, r.Sizes)
	if len(r.Notes) > 0 {
		b.WriteString("\nNot checked:\n")
		for _, note := range r.Notes {
			wrap(&b, "  - ", "    ", note)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func tally(c map[Severity]int) string {
	total := c[Error] + c[Warning] + c[Info]
	if total == 0 {
		return "no findings"
	}
	var parts []string
	for _, s := range severities {
		if c[s] == 1 {
			parts = append(parts, "1 "+string(s))
		} else if c[s] > 1 {
			parts = append(parts, fmt.Sprintf("%d %ss", c[s], s))
		}
	}
	return strings.Join(parts, ", ")
}

// wrap writes text after first, wrapped at textWidth, continuing lines
// with rest. Words longer than a line (cgroup paths) are not split.
func wrap(b *strings.Builder, first, rest, text string) {
	line := first
	empty := true
	for _, word := range strings.Fields(text) {
		if !empty && len([]rune(line))+1+len([]rune(word)) > textWidth {
			b.WriteString(line + "\n")
			line, empty = rest, true
		}
		if !empty {
			line += " "
		}
		line += word
		empty = false
	}
	b.WriteString(line + "\n")
}
