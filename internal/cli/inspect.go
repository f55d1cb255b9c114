package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inspect"
	"github.com/cgwarden/cgwarden/internal/weights"
)

func newInspect(o *Options) *cobra.Command {
	var demand bool
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Show the node's cgroups as pods and containers, with weights, limits, guaranteed and used CPU, and memory",
		Example: `  cgwarden inspect
  cgwarden inspect --pods pods.json --demand --interval 5s
  cgwarden inspect -o json | jq '.pods[] | select(.containers[].misplaced)'
  cgwarden inspect --snapshot example:seed-000-eks-neonvm`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			meta, err := LoadMeta(o)
			if err != nil {
				return err
			}
			scan := ScanNode
			if demand {
				scan = ScanNodeDemand
			}
			n, err := scan(o, meta, time.Duration(o.Interval))
			if err != nil {
				return err
			}
			o.checkPodsMatch(meta, n)
			sized, held := weights.Views(n, meta, 0)
			switch o.Output {
			case "json":
				return inspect.WriteJSON(cmd.OutOrStdout(), n, sized)
			case "", "text":
				var hints []string
				if o.Snapshot == "" {
					hints = append(hints, "To see what cgwarden shows on a Kubernetes node, try an embedded example snapshot:")
					for _, name := range examples.Names() {
						hints = append(hints, "  cgwarden inspect --snapshot "+examples.Prefix+name)
					}
				}
				if err := inspect.WriteText(cmd.OutOrStdout(), n, hints); err != nil {
					return err
				}
				return inspect.WriteSized(cmd.OutOrStdout(), sized, held)
			}
			return fmt.Errorf("-o %s: want text or json", o.Output)
		},
	}
	addOutput(cmd, o)
	addVMs(cmd.Flags(), o)
	cmd.Flags().BoolVar(&demand, "demand", false, "also measure each cgroup's CPU demand over --interval (its threads' run + wait time) and show its fair share under that demand")
	cmd.Flags().Var(&o.Interval, "interval", "time between the two samples CPU rates are measured over (0 for one sample, no rates)")
	return cmd
}

func addOutput(cmd *cobra.Command, o *Options) {
	cmd.Flags().StringVarP(&o.Output, "output", "o", "text", "output format: "+strings.Join([]string{"text", "json"}, " or "))
}
