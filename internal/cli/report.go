package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/report"
)

func newReport(o *Options) *cobra.Command {
	var htmlFile string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Write the node's cgroups, findings and charts as one self-contained HTML file",
		Long: "report reads the node (or a snapshot) as inspect and audit do and writes one HTML file that loads nothing: " +
			"the node, the findings with their evidence and remedies, the pod tree with weights, guaranteed and used CPU, " +
			"and charts (each tier's sized pods by weight against by size, guaranteed against used CPU per pod), each with a table of its figures.",
		Example: `  cgwarden report --html node.html
  cgwarden report --pods pods.json --vms vms.json --html node.html
  cgwarden report --snapshot example:seed-000-eks-neonvm --html seed-000.html`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if htmlFile == "" {
				return &ExitError{Code: 2, Err: fmt.Errorf("--html FILE is required: report writes HTML only")}
			}
			meta, err := LoadMeta(o)
			if err != nil {
				return err
			}
			n, err := scanNode(o, meta, time.Duration(o.Interval), false)
			if err != nil {
				return err
			}
			o.checkPodsMatch(meta, n)
			r := audit.Run(&audit.Input{Node: n, Meta: meta})
			source := "snapshot " + o.Snapshot
			if o.Snapshot == "" {
				host, _ := os.Hostname()
				source = fmt.Sprintf("live host %s (%s), %s", host, where(o), n.Time.UTC().Format(time.RFC3339))
			}
			page := report.Build("cgwarden report", source, n, meta, *r)
			return writeFileWith(htmlFile, func(f *os.File) error { return report.Write(f, page) })
		},
	}
	addVMs(cmd.Flags(), o)
	cmd.Flags().Var(&o.Interval, "interval", "time between the two samples CPU usage is measured over (0 for one sample: no usage)")
	cmd.Flags().StringVar(&htmlFile, "html", "", "write the report to `FILE`")
	return cmd
}
