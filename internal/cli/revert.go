package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

func newRevert(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "revert",
		Short: "(not built yet)",
		RunE:  func(*cobra.Command, []string) error { return errors.New("revert is not built yet") },
	}
}
