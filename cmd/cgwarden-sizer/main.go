// Command cgwarden-sizer is cgwarden's cluster-wide sizer: a mutating
// admission webhook and a resize controller for VM pods (docs/sizing.md,
// `cgwarden-sizer --help`). It is a binary apart from cgwarden, the node
// agent, so that the agent links none of client-go's typed clientset.
package main

import (
	"os"

	"github.com/cgwarden/cgwarden/internal/sizercmd"
)

func main() { os.Exit(sizercmd.Main(os.Args[1:])) }
