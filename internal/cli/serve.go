package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

func newServe(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "(not built yet)",
		RunE:  func(*cobra.Command, []string) error { return errors.New("serve is not built yet") },
	}
}
