package cli

import (
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inspect"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/weights"
)

// inspectFlags are inspect's own flags.
type inspectFlags struct {
	demand    bool
	noHeaders bool
	sortBy    string
}

func newInspect(o *Options) *cobra.Command {
	var f inspectFlags
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Show the node's cgroups as pods and containers, with weights, limits, guaranteed and used CPU, and memory",
		Example: `  cgwarden inspect
  cgwarden inspect -n kube-system --sort-by cpu
  cgwarden inspect -l app=web -o wide
  cgwarden inspect --demand --interval 5s
  cgwarden inspect -o json | jq '.pods[] | select(.containers[].misplaced)'
  cgwarden inspect --snapshot example:seed-000-eks-neonvm --pods pods.json -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runInspect(cmd.OutOrStdout(), o, f) },
	}
	addOutput(cmd, o, readFormats...)
	addVMs(cmd.Flags(), o)
	addMeta(cmd, o)
	addSelect(cmd, o)
	cmd.Flags().BoolVar(&f.demand, "demand", false, "also measure each cgroup's CPU demand over --interval (its threads' run + wait time) and show its fair share under that demand")
	cmd.Flags().Var(&o.Interval, "interval", "time between the two samples CPU rates are measured over (0 for one sample, no rates)")
	cmd.Flags().BoolVar(&f.noHeaders, "no-headers", false, "text and wide: write the table's rows only (no node line, column headers or notes)")
	cmd.Flags().StringVar(&f.sortBy, "sort-by", "", "order sibling cgroups (and -o json/yaml's pods) by `KEY`: "+strings.Join(inspect.SortKeys, ", ")+" (name A to Z, figures largest first)")
	return cmd
}

// runInspect scans the node and writes it in the chosen format.
func runInspect(w io.Writer, o *Options, f inspectFlags) error {
	if err := checkOutput(o, readFormats); err != nil {
		return err
	}
	order, err := inspect.Order(f.sortBy)
	if err != nil {
		return err
	}
	filter, err := o.filter()
	if err != nil {
		return err
	}
	meta, err := LoadMeta(o)
	if err != nil {
		return err
	}
	n, err := scanNode(o, meta, time.Duration(o.Interval), f.demand)
	if err != nil {
		return err
	}
	o.checkPodsMatch(meta, n)
	o.checkFilter(filter, meta)
	keep := func(p *inventory.Pod) bool { return filter.Match(p.UID, p.Namespace, p.Name, meta) }
	sized, held := weights.Views(n, meta, 0)
	sized = slices.DeleteFunc(sized, func(v weights.View) bool { return !keep(v.Pod) })
	if o.Output == "json" || o.Output == "yaml" {
		sel := *n
		sel.Pods = slices.DeleteFunc(slices.Clone(n.Pods), func(p *inventory.Pod) bool { return !keep(p) })
		inspect.SortPods(sel.Pods, order)
		return writeData(w, o.Output, inspect.NewReport(&sel, sized))
	}
	opt := inspect.TextOptions{Width: termWidth(w), Wide: o.Output == "wide", NoHeaders: f.noHeaders, Keep: keep, Order: order, Hints: o.exampleHints()}
	if err := inspect.WriteText(w, n, opt); err != nil || f.noHeaders {
		return err
	}
	return inspect.WriteSized(w, sized, held)
}

// exampleHints point at the embedded snapshots when the live host is not
// a Kubernetes node.
func (o *Options) exampleHints() []string {
	if o.Snapshot != "" {
		return nil
	}
	hints := []string{"To see what cgwarden shows on a Kubernetes node, try an embedded example snapshot:"}
	for _, name := range examples.Names() {
		hints = append(hints, "  cgwarden inspect --snapshot "+examples.Prefix+name)
	}
	return hints
}

// checkFilter warns when a label selector cannot match: without pod
// metadata no pod has labels.
func (o *Options) checkFilter(f *metadata.Filter, meta *metadata.Set) {
	if f.Selector != nil && meta == nil {
		o.warnf("--selector %s: no pod metadata, so no pod has labels to match (give --pods, or a --metadata source that answers)", o.Select.Selector)
	}
}

// termWidth is the width the text view fits in: $COLUMNS when set, else
// the width of the terminal w is; 0 (no limit) on a pipe or a file.
func termWidth(w io.Writer) int {
	if c, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && c > 0 {
		return c
	}
	if f, ok := w.(*os.File); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			return cols
		}
	}
	return 0
}
