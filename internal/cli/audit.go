package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// auditFormats are audit's -o values (its text is no table: no wide).
var auditFormats = []string{"text", "json", "yaml"}

// selectFindings keeps the findings about the selected pods. A finding
// about no pod (a QoS tier, a host cgroup) is left out once a selection
// is made: it is not about the pods asked for.
func selectFindings(r *audit.Report, f *metadata.Filter, meta *metadata.Set) {
	if !f.Active() {
		return
	}
	kept := r.Findings[:0]
	for _, x := range r.Findings {
		s := x.Subject
		if (s.PodUID != "" || s.PodName != "") && f.Match(s.PodUID, s.Namespace, s.PodName, meta) {
			kept = append(kept, x)
		}
	}
	r.Findings = kept
}

// auditFlags are audit's own flags.
type auditFlags struct {
	failOn          string
	starvation      float64
	allowNoKubepods bool
}

func newAudit(o *Options) *cobra.Command {
	var f auditFlags
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Find what is wrong with the pods' cgroups: the cause, the numbers, what it breaks and how to fix it",
		Long: "audit reads the node (or a snapshot) and reports findings: BestEffort pods starved under contention, " +
			"weights blind to VM sizes, containers outside their pod, pods whose CPU reads short, processes outside " +
			"kubepods, weights that drifted, leftover pod cgroups. Exit code 0 when nothing is at or above --fail-on, " +
			"1 when something is, 2 when the audit itself failed.",
		Example: `  cgwarden audit
  cgwarden audit --pods pods.json --vms vms.json --fail-on warning
  kubectl get pods -A -o json > pods.json && cgwarden audit --pods pods.json -o json
  cgwarden audit -n default -o yaml
  cgwarden audit --snapshot example:seed-003-k3s-spin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAudit(cmd.OutOrStdout(), o, f) },
	}
	addOutput(cmd, o, auditFormats...)
	addVMs(cmd.Flags(), o)
	addMeta(cmd, o)
	addSelect(cmd, o)
	cmd.Flags().Var(&o.Interval, "interval", "time between the two samples CPU usage is measured over (0 for one sample: no usage-based checks)")
	cmd.Flags().StringVar(&f.failOn, "fail-on", "error", "exit 1 when a finding is at least this severe: error, warning or info")
	cmd.Flags().BoolVar(&f.allowNoKubepods, "allow-no-kubepods", false, "audit a node where no kubepods hierarchy was found (by default that is exit 2: there is nothing to audit)")
	cmd.Flags().Float64Var(&f.starvation, "starvation-cores", audit.DefaultStarvationCores, "besteffort-starvation threshold: a BestEffort pod guaranteed fewer cores than this under contention is reported")
	return cmd
}

// runAudit audits the node and writes the findings; exit 1 when one is
// at or above --fail-on, 2 when the audit itself failed.
func runAudit(w io.Writer, o *Options, f auditFlags) error {
	fail, err := audit.ParseSeverity(f.failOn)
	if err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("--fail-on: %w", err)}
	}
	if f.starvation <= 0 || f.starvation > 1e6 {
		return &ExitError{Code: 2, Err: fmt.Errorf("--starvation-cores %v: want a positive number of cores", f.starvation)}
	}
	if err := checkOutput(o, auditFormats); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	filter, err := o.filter()
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	meta, err := LoadMeta(o)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	n, err := scanNode(o, meta, time.Duration(o.Interval), true)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	if n.KubeRoot == nil && !f.allowNoKubepods {
		return &ExitError{Code: 2, Err: noKubepodsError(o)}
	}
	o.checkPodsMatch(meta, n)
	o.checkFilter(filter, meta)
	r := audit.Run(&audit.Input{Node: n, Meta: meta, Policy: audit.Policy{StarvationCores: f.starvation}})
	selectFindings(r, filter, meta)
	if err := writeAudit(w, o.Output, n, r); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	if r.AtOrAbove(fail) {
		return &ExitError{Code: 1}
	}
	return nil
}

// writeAudit writes the findings as text, JSON or YAML.
func writeAudit(w io.Writer, format string, n *inventory.Node, r *audit.Report) error {
	if format == "text" {
		return audit.WriteText(w, n, r)
	}
	return writeData(w, format, audit.JSON(n, r))
}

// noKubepodsError is why audit refuses a node without a kubepods hierarchy.
func noKubepodsError(o *Options) error {
	return fmt.Errorf("no kubepods hierarchy found %s: there is nothing to audit (not a Kubernetes node, or --host-root does not point at the host's /; --allow-no-kubepods audits what there is)", where(o))
}

// where names the node a command read, for messages.
func where(o *Options) string {
	if o.Snapshot != "" {
		return "in snapshot " + o.Snapshot
	}
	if o.HostRoot != "/" {
		return "under --host-root " + o.HostRoot
	}
	return "on this host"
}
