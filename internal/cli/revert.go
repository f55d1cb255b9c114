package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/journal"
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
		RunE: func(cmd *cobra.Command, _ []string) error { return runRevert(cmd.OutOrStdout(), o, dir, all) },
	}
	addOutput(cmd, o)
	cmd.Flags().BoolVar(&all, "all", false, "undo every recorded apply, newest first")
	cmd.Flags().StringVar(&dir, "journal-dir", journal.DefaultDir, "the `DIR` where the journal of applied changes (and its lock) lives")
	return cmd
}

// runRevert undoes the journal's last run (or all) on the live host and
// prints what it did; it exits 1 when something could not be undone.
func runRevert(out io.Writer, o *Options, dir string, all bool) error {
	if o.Snapshot != "" {
		return fmt.Errorf("revert works on the live node, not on a snapshot")
	}
	if err := journalDirReadable(dir); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	host, err := cgroupfs.OpenHost(o.HostRoot)
	if err != nil {
		return err
	}
	defer host.Close()
	e := &fix.Engine{FS: host, JournalDir: dir}
	defer openUnits(e, o.HostRoot)()
	rep, err := e.Revert(all)
	if rep != nil {
		if werr := fix.WriteRevert(out, o.Output, rep); werr != nil && err == nil {
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
}

// journalDirReadable refuses a --journal-dir that does not exist or cannot
// be read: an empty journal says "Nothing to revert.", and a typo in the
// directory would say so too while the real journal's changes stay on the
// node.
func journalDirReadable(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--journal-dir %s does not exist: no fix --apply or serve --fix journaled there (the default is %s)", dir, journal.DefaultDir)
	case err != nil:
		return fmt.Errorf("--journal-dir %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("--journal-dir %s is not a directory", dir)
	}
	if _, err := os.ReadDir(dir); err != nil {
		return fmt.Errorf("--journal-dir %s cannot be read: %w", dir, err)
	}
	return nil
}
