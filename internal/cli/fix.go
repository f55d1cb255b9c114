package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

type fixFlags struct {
	apply, removeSource bool
	only                []string
	pod                 string
	journalDir          string
	maxTierCPU          string
}

// options turns the flags into the engine's options.
func (f *fixFlags) options() (fix.Options, error) {
	o := fix.Options{Pod: f.pod, Only: f.only, RemoveEmptySource: f.removeSource}
	if err := plan.CheckOnly(f.only); err != nil {
		return o, err
	}
	if f.maxTierCPU != "" {
		m, err := metadata.TierCPU(f.maxTierCPU)
		if err != nil {
			return o, err
		}
		o.MaxTierMilliCPU = m
	}
	return o, nil
}

// runFix plans from the node (or a snapshot) and prints the plan, or with
// --apply makes it and prints what was done.
func runFix(out io.Writer, o *Options, f *fixFlags) error {
	if o.Output != "text" && o.Output != "json" {
		return fmt.Errorf("-o %s: want text or json", o.Output)
	}
	opts, err := f.options()
	if err != nil {
		return err
	}
	e, closeFS, err := o.fixEngine(f)
	if err != nil {
		return err
	}
	defer closeFS()
	if !f.apply {
		p, _, err := e.Plan(opts)
		if err != nil {
			return err
		}
		if o.Snapshot != "" {
			o.warnUnrecorded(e.FS, p)
		}
		return fix.WriteDryRun(out, o.Output, p, o.Snapshot != "")
	}
	res, err := e.Apply(opts)
	if res != nil {
		if werr := fix.WriteResult(out, o.Output, res); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

// fixEngine is the engine over the snapshot's last sample (read only), or
// over the live host, which writes nowhere until the engine grants its
// policy's paths.
func (o *Options) fixEngine(f *fixFlags) (*fix.Engine, func(), error) {
	meta, err := LoadMeta(o)
	if err != nil {
		return nil, nil, err
	}
	e := &fix.Engine{JournalDir: f.journalDir, Meta: meta, By: journal.ByFix}
	if o.Snapshot != "" {
		if f.apply {
			return nil, nil, errors.New("--apply works on the live node, not on a snapshot")
		}
		s, err := o.loadSnapshot()
		if err != nil {
			return nil, nil, err
		}
		e.FS = readOnly{s.Samples[len(s.Samples)-1].FS}
		return e, func() {}, nil
	}
	host, err := cgroupfs.OpenHost(o.HostRoot)
	if err != nil {
		return nil, nil, err
	}
	e.FS = host
	// A misplaced container is adopted only where the host's /proc shows
	// its runtime put it (inventory.Evidence: the processes' parent is
	// the one that started the pod's own).
	e.Evidence = &inventory.Evidence{FS: host}
	closeUnits := openUnits(e, o.HostRoot)
	return e, func() { closeUnits(); host.Close() }, nil
}

// openUnits gives e systemd's door when systemd runs the node (the
// weights of its units are then set as unit properties), and returns what
// closes it.
func openUnits(e *fix.Engine, root string) func() {
	b, why, err := systemd.OpenNode(context.Background(), root)
	if err != nil {
		slog.Warn(err.Error())
	}
	if b == nil {
		slog.Debug(why)
		return func() {}
	}
	slog.Debug(why)
	e.Units = b
	return func() { _ = b.Close() }
}

func newFix(o *Options) *cobra.Command {
	var f fixFlags
	cmd := &cobra.Command{
		Use:   "fix",
		Short: "Plan (and with --apply, make) the cgroup changes that repair what audit finds: misplaced containers moved back under their pod, VM pods weighted by their size",
		Long: `fix computes a plan of cgroup operations from the node's state and prints it; nothing changes
without --apply. With --apply every operation is journaled (with the value it replaces) before it
is applied, so 'cgwarden revert' can undo it.

Rules it repairs: misplaced-container (move the processes back under their pod), size-blind-weights
(the pod and VM container cgroups of sized BestEffort pods get the weight the kubelet would give
their size as a request) and besteffort-starvation (the BestEffort tier weighs 2 + its sized pods'
weights). Sizes come from --vms, the NeonVM runner's own arguments and the cgwarden.io/cpu
annotation (--pods). The kubelet resets the tier within a minute: 'cgwarden serve --fix' holds it.
See docs/fix.md and docs/weights.md.`,
		Example: `  cgwarden fix                          # the plan: a dry run
  cgwarden fix --pod default/my-pod     # only this pod
  cgwarden fix --apply                  # make the changes, journaled
  cgwarden revert                       # undo them
  # weigh VM pods by their size, and make it so
  cgwarden fix --pods pods.json --vms vms.json --only size-blind-weights,besteffort-starvation --apply`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runFix(cmd.OutOrStdout(), o, &f) },
	}
	addOutput(cmd, o)
	fl := cmd.Flags()
	fl.BoolVar(&f.apply, "apply", false, "make the changes (default: print the plan only)")
	fl.StringSliceVar(&f.only, "only", nil, "repair only findings of these rules (comma-separated: "+strings.Join(plan.Rules, ", ")+")")
	fl.StringVar(&f.maxTierCPU, "max-tier-cpu", "", "cap on the CPU sizes the BestEffort tier's weight counts (a CPU quantity; default: the node's CPUs)")
	addVMs(fl, o)
	fl.StringVar(&f.pod, "pod", "", "repair only this pod (UID, or name / namespace/name with --pods)")
	fl.StringVar(&f.journalDir, "journal-dir", journal.DefaultDir, "the `DIR` where the journal of applied changes (and its lock) lives")
	fl.BoolVar(&f.removeSource, "remove-empty-source", false, "also remove the runtime's cgroup once it is empty (it belongs to the runtime; left in place by default)")
	return cmd
}

// readOnly lets a snapshot stand in for the live door in a dry run.
type readOnly struct{ cgroupfs.FS }

var errSnapshotWrite = errors.New("a snapshot cannot be written")

func (readOnly) WriteFile(string, []byte) error { return errSnapshotWrite }
func (readOnly) Mkdir(string) error             { return errSnapshotWrite }
func (readOnly) Rmdir(string) error             { return errSnapshotWrite }
