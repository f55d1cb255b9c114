package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newSizerMoved is what is left of `cgwarden sizer`: the sizer is its own
// binary, cgwarden-sizer (cmd/cgwarden-sizer, /cgwarden-sizer in the
// image), so that the agent's binary links none of client-go's typed
// clientset, informer factory and whole scheme (docs/benchmarks.md). Hidden;
// it exits 2 saying where the sizer went, so that a Deployment still
// running `cgwarden sizer` with a newer image says why in its log.
func newSizerMoved() *cobra.Command {
	return &cobra.Command{
		Use:                "sizer",
		Short:              "Moved: run cgwarden-sizer",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return &ExitError{Code: 2, Err: fmt.Errorf("the sizer is its own binary now: run cgwarden-sizer with the same flags (/cgwarden-sizer in the image; see docs/sizing.md)")}
		},
	}
}
