package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/buildinfo"
	"github.com/cgwarden/cgwarden/internal/cliflag"
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
	// Meta chooses the pod metadata source (inspect, audit).
	Meta MetaFlags
	// Select chooses the pods shown (inspect, audit).
	Select SelectFlags
	// metaSource names where the pod metadata came from, for messages;
	// metaMissing says why auto found none.
	metaSource, metaMissing string
	// stderr takes the warnings of read commands (a snapshot that does
	// not prove it is whole, a pods file from another node).
	stderr io.Writer
}

// warnf writes a warning line to stderr.
func (o *Options) warnf(format string, a ...any) {
	fmt.Fprintf(o.stderr, "cgwarden: warning: "+format+"\n", a...)
}

// infof writes an informational line to stderr (stdout stays the
// command's output, for tools).
func (o *Options) infof(format string, a ...any) {
	fmt.Fprintf(o.stderr, "cgwarden: "+format+"\n", a...)
}

// NewRoot builds the command tree.
func NewRoot(stdout, stderr io.Writer) *cobra.Command {
	o := &Options{Interval: Duration(defaultInterval), stderr: stderr}
	root := &cobra.Command{
		Use:   "cgwarden",
		Short: "Keep the cgroups of Kubernetes pods honest",
		Long:  "cgwarden shows what each pod's cgroups really get and use, finds containers a runtime put outside their pod, serves pod metrics from where the processes really are, and fixes weights and placement with a way back.",
		Example: `  cgwarden inspect                                  # this node's pods' cgroups
  cgwarden audit --pods pods.json                   # what is wrong, and how to fix it
  cgwarden snapshot -f node.snapshot                # for a bug report
  cgwarden audit --snapshot example:seed-003-k3s-spin`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildinfo.Get().String(),
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// Anything but a --log-level value is an error (exit code
			// 2), not silently info.
			lvl, err := cliflag.ParseLogLevel(o.LogLevel)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})))
			if f := cmd.Flags().Lookup("interval"); f != nil && f.Changed && o.Snapshot != "" && cmd.Name() != "snapshot" {
				o.warnf("--interval %s is ignored with --snapshot: the figures come from the snapshot's own samples", f.Value)
			}
			return nil
		},
	}
	root.SetVersionTemplate("cgwarden {{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&o.HostRoot, "host-root", "/", "the `DIR` where the host's / is mounted (e.g. /host in a container that mounts the host's /sys/fs/cgroup and /proc there)")
	pf.StringVar(&o.Snapshot, "snapshot", "", "read the node from a snapshot `FILE` instead of the live host (example:NAME for an embedded one: cgwarden examples lists them)")
	pf.StringVar(&o.PodsFile, "pods", "", "pod metadata: a `FILE` holding the output of kubectl get pods -A -o json")
	pf.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.AddCommand(newInspect(o), newSnapshot(o), newAudit(o), newServe(o), newFix(o), newRevert(o), newVersion(), newExamples(), newDemo(o), newDemoChild(), newReport(o), newSizerMoved(), newNRI())
	addCompletions(root)
	return root
}

// Main runs the CLI and returns the process exit code.
func Main(args []string) int {
	root := NewRoot(os.Stdout, os.Stderr)
	root.SetArgs(args)
	return exitCode(root, root.Execute())
}

// exitCode prints a command's error to its stderr and returns the exit
// code: an ExitError's, else 2.
func exitCode(root *cobra.Command, err error) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			root.PrintErrln("cgwarden:", ee.Err)
		}
		return ee.Code
	}
	root.PrintErrln("cgwarden:", err)
	return 2
}
