// Package sizercmd is cgwarden-sizer's command line: it binds the sizer's
// flags into sizer.Options, checks them and runs the sizer (internal/sizer)
// until SIGTERM or SIGINT; no logic lives here.
//
// The sizer is a binary of its own (cmd/cgwarden-sizer), not a subcommand
// of cgwarden: Go runs the initialisation of every package a binary links,
// whatever the subcommand, and the sizer links client-go's typed
// clientset, informer factory and leader election, which register every
// built-in API group at start. In the agent's binary that cost the node
// agent about 12 MiB of RSS on every node (docs/benchmarks.md). Only
// cmd/cgwarden-sizer imports this package.
package sizercmd
