package cli

import (
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
)

// ExitError carries a process exit code out of a command (audit uses 1
// for "findings at or above --fail-on").
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return "exit status"
	}
	return e.Err.Error()
}
func (e *ExitError) Unwrap() error { return e.Err }

// Options are the flags every read command shares.
type Options struct {
	HostRoot string
	Snapshot string
	PodsFile string
	VMsFile  string
	Interval Duration
	Output   string
	LogLevel string
}

// NewRoot builds the command tree.
func NewRoot(stdout, stderr io.Writer) *cobra.Command {
	o := &Options{Interval: Duration(defaultInterval)}
	root := &cobra.Command{
		Use:           "cgwarden",
		Short:         "Keep the cgroups of Kubernetes pods honest",
		Long:          "cgwarden shows what each pod's cgroups really get and use, finds containers a runtime put outside their pod, serves pod metrics from where the processes really are, and fixes weights and placement with a way back.",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			lvl := slog.LevelInfo
			_ = lvl.UnmarshalText([]byte(o.LogLevel))
			slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})))
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&o.HostRoot, "host-root", "/", "where the host's / is mounted (e.g. /host in a container that mounts the host's /sys/fs/cgroup and /proc there)")
	pf.StringVar(&o.Snapshot, "snapshot", "", "read the node from a snapshot file instead of the live host (example:<name> for an embedded one)")
	pf.StringVar(&o.PodsFile, "pods", "", "pod metadata: a file holding the output of kubectl get pods -A -o json")
	pf.StringVar(&o.LogLevel, "log-level", "info", "debug, info, warn or error")
	root.AddCommand(newInspect(o), newSnapshot(o), newAudit(o), newServe(o), newFix(o), newRevert(o))
	return root
}

// Main runs the CLI and returns the process exit code.
func Main(args []string) int {
	root := NewRoot(os.Stdout, os.Stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		if ee, ok := err.(*ExitError); ok {
			if ee.Err != nil {
				root.PrintErrln("cgwarden:", ee.Err)
			}
			return ee.Code
		}
		root.PrintErrln("cgwarden:", err)
		return 2
	}
	return 0
}
