package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/plan"
)

func newRevert(o *Options) *cobra.Command {
	var all bool
	var dir string
	cmd := &cobra.Command{
		Use:   "revert",
		Short: "Undo the last `cgwarden fix --apply` (or --all), newest change first",
		Long: `revert undoes the changes of the last apply recorded in the journal, newest first, looking at
each cgroup's current state, and tells what it could not undo (a process that has exited, a cgroup
its runtime removed). It exits 1 when something could not be undone.`,
		Example: `  cgwarden revert        # undo the last apply
  cgwarden revert --all  # undo every recorded apply`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Snapshot != "" {
				return fmt.Errorf("revert works on the live node, not on a snapshot")
			}
			host, err := cgroupfs.OpenHost(o.HostRoot)
			if err != nil {
				return err
			}
			defer host.Close()
			e := &fix.Engine{FS: host, JournalDir: dir}
			rep, err := e.Revert(all)
			if rep != nil {
				if werr := writeRevert(cmd, o.Output, rep); werr != nil && err == nil {
					err = werr
				}
			}
			if err != nil {
				return err
			}
			if n := len(rep.Failed()); n > 0 {
				return &ExitError{Code: 1, Err: fmt.Errorf("%d change(s) could not be undone", n)}
			}
			return nil
		},
	}
	addOutput(cmd, o)
	cmd.Flags().BoolVar(&all, "all", false, "undo every recorded apply, newest first")
	cmd.Flags().StringVar(&dir, "journal-dir", journal.DefaultDir, "the `DIR` where the journal of applied changes (and its lock) lives")
	return cmd
}

func writeRevert(cmd *cobra.Command, output string, rep *fix.RevertReport) error {
	w := cmd.OutOrStdout()
	if output == "json" {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(rep)
	}
	if len(rep.Runs) == 0 {
		_, err := fmt.Fprintln(w, "Nothing to revert.")
		return err
	}
	fmt.Fprintf(w, "Reverted run(s) %v, newest change first:\n", rep.Runs)
	for _, u := range rep.Undos {
		what := u.Op.Path
		if u.Op.Kind == plan.Move && len(u.Op.Pairs) > 0 {
			what = "processes back into " + u.Op.Pairs[0].Source
			if len(u.MovedBack) > 0 {
				what += fmt.Sprintf(" (%v)", u.MovedBack)
			}
		}
		fmt.Fprintf(w, "  %-16s %-5s %s", u.Status, u.Op.Kind, what)
		if u.Note != "" {
			fmt.Fprintf(w, ": %s", u.Note)
		}
		fmt.Fprintln(w)
	}
	_, err := fmt.Fprintf(w, "%d change(s) could not be undone.\n", len(rep.Failed()))
	return err
}
