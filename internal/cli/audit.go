package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

func newAudit(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "audit",
		Short: "(not built yet)",
		RunE:  func(*cobra.Command, []string) error { return errors.New("audit is not built yet") },
	}
}
