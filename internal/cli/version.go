package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/buildinfo"
)

func newVersion() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print cgwarden's version, the commit it was built from and its Go version",
		Example: `  cgwarden version
  cgwarden version -o json
  cgwarden --version`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := buildinfo.Get()
			w := cmd.OutOrStdout()
			switch output {
			case "json":
				e := json.NewEncoder(w)
				e.SetIndent("", "  ")
				return e.Encode(in)
			case "", "text":
				commit := in.Commit()
				if in.Time != "unknown" {
					commit += " (" + in.Time + ")"
				}
				_, err := fmt.Fprintf(w, "version: %s\ncommit:  %s\ngo:      %s\n", in.Version, commit, in.GoVersion)
				return err
			}
			return &ExitError{Code: 2, Err: fmt.Errorf("-o %s: want text or json", output)}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
