package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/examples"
)

func newExamples() *cobra.Command {
	return &cobra.Command{
		Use:   "examples",
		Short: "List the example snapshots built into cgwarden (real node layouts, for --snapshot example:NAME)",
		Example: `  cgwarden examples
  cgwarden audit --snapshot example:seed-003-k3s-spin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			for _, name := range examples.Names() {
				s, err := LoadSnapshot(examples.Prefix + name)
				if err != nil {
					return err
				}
				origin := ""
				for _, n := range s.Notes {
					if o, ok := strings.CutPrefix(n, "origin:"); ok {
						origin = strings.TrimSpace(o)
						break
					}
				}
				fmt.Fprintf(w, "%s%s\n", examples.Prefix, name)
				if origin != "" {
					fmt.Fprintf(w, "    %s\n", origin)
				}
			}
			_, err := fmt.Fprintln(w, "\nUse one with any read command, e.g. cgwarden inspect --snapshot "+examples.Prefix+examples.Names()[0])
			return err
		},
	}
}
