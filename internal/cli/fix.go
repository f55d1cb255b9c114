package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

func newFix(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "fix",
		Short: "(not built yet)",
		RunE:  func(*cobra.Command, []string) error { return errors.New("fix is not built yet") },
	}
}
