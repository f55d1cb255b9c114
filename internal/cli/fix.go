package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/plan"
)

type fixFlags struct {
	apply, removeSource bool
	only, pod           string
	journalDir          string
}

func newFix(o *Options) *cobra.Command {
	var f fixFlags
	cmd := &cobra.Command{
		Use:   "fix",
		Short: "Plan (and with --apply, make) the cgroup changes that repair what audit finds: misplaced containers moved back under their pod",
		Long: `fix computes a plan of cgroup operations from the node's state and prints it; nothing changes
without --apply. With --apply every operation is journaled (with the value it replaces) before it
is applied, so 'cgwarden revert' can undo it. See docs/fix.md.`,
		Example: `  cgwarden fix                          # the plan: a dry run
  cgwarden fix --pod default/my-pod     # only this pod
  cgwarden fix --apply                  # make the changes, journaled
  cgwarden revert                       # undo them`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Output != "text" && o.Output != "json" {
				return fmt.Errorf("-o %s: want text or json", o.Output)
			}
			meta, err := LoadPods(o.PodsFile)
			if err != nil {
				return err
			}
			opts := fix.Options{Pod: f.pod, Only: f.only, RemoveEmptySource: f.removeSource}
			e := &fix.Engine{JournalDir: f.journalDir, Meta: meta}
			if o.Snapshot != "" {
				if f.apply {
					return errors.New("--apply works on the live node, not on a snapshot")
				}
				s, err := o.loadSnapshot()
				if err != nil {
					return err
				}
				e.FS = readOnly{s.Samples[len(s.Samples)-1].FS}
			} else {
				host, err := cgroupfs.OpenHost(o.HostRoot)
				if err != nil {
					return err
				}
				defer host.Close()
				e.FS = host // writes nowhere until the engine grants its policy's paths
			}
			out := cmd.OutOrStdout()
			if !f.apply {
				p, _, err := e.Plan(opts)
				if err != nil {
					return err
				}
				if o.Snapshot != "" {
					o.warnUnrecorded(e.FS, p)
				}
				if o.Output == "json" {
					return plan.WriteJSON(out, p)
				}
				if err := plan.WriteText(out, p); err != nil {
					return err
				}
				switch {
				case len(p.Ops) == 0:
				case o.Snapshot != "":
					_, err = fmt.Fprintln(out, "This was a dry run from a snapshot: nothing was changed. To make these changes, run `cgwarden fix --apply` on the node the snapshot was taken from (it plans again from the node's state then); `cgwarden revert` undoes them.")
				default:
					_, err = fmt.Fprintln(out, "This was a dry run: nothing was changed. Run with --apply to make these changes; `cgwarden revert` undoes them.")
				}
				return err
			}
			res, err := e.Apply(opts)
			if res != nil {
				if werr := writeResult(out, o.Output, res); werr != nil && err == nil {
					err = werr
				}
			}
			return err
		},
	}
	addOutput(cmd, o)
	fl := cmd.Flags()
	fl.BoolVar(&f.apply, "apply", false, "make the changes (default: print the plan only)")
	fl.StringVar(&f.only, "only", "", "repair only findings of this rule (misplaced-container)")
	fl.StringVar(&f.pod, "pod", "", "repair only this pod (UID, or name / namespace/name with --pods)")
	fl.StringVar(&f.journalDir, "journal-dir", journal.DefaultDir, "the `DIR` where the journal of applied changes (and its lock) lives")
	fl.BoolVar(&f.removeSource, "remove-empty-source", false, "also remove the runtime's cgroup once it is empty (it belongs to the runtime; left in place by default)")
	return cmd
}

func writeResult(w io.Writer, output string, res *fix.Result) error {
	if output == "json" {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(res)
	}
	if err := plan.WriteText(w, res.Plan); err != nil {
		return err
	}
	if res.Run == "" {
		return nil
	}
	verb := "Applied"
	if res.Resumed {
		verb = "Continued the cut-off run and applied"
	}
	fmt.Fprintf(w, "%s %d of %d operations (journal run %s).\n", verb, len(res.Steps), len(res.Plan.Ops), res.Run)
	for _, s := range res.Steps {
		if s.Note != "" && s.Op.Optional {
			fmt.Fprintf(w, "  %s: %s\n", s.Op.Path, s.Note)
		}
		if s.Op.Kind == plan.Move {
			fmt.Fprintf(w, "  moved processes %v", s.Moved)
			if len(s.Exited) > 0 {
				fmt.Fprintf(w, " (%v exited before they could be moved)", s.Exited)
			}
			fmt.Fprintln(w)
		}
	}
	_, err := fmt.Fprintln(w, "`cgwarden revert` undoes this run.")
	return err
}

// readOnly lets a snapshot stand in for the live door in a dry run.
type readOnly struct{ cgroupfs.FS }

var errSnapshotWrite = errors.New("a snapshot cannot be written")

func (readOnly) WriteFile(string, []byte) error { return errSnapshotWrite }
func (readOnly) Mkdir(string) error             { return errSnapshotWrite }
func (readOnly) Rmdir(string) error             { return errSnapshotWrite }
