package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/aggregate"
	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

func newSnapshot(o *Options) *cobra.Command {
	var out, note string
	cmd := &cobra.Command{
		Use:   "snapshot -o FILE",
		Short: "Capture everything cgwarden reads from this node into one file (for bug reports and --snapshot)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("-o FILE is required")
			}
			if o.Snapshot != "" {
				return fmt.Errorf("snapshot reads the live host; --snapshot makes no sense here")
			}
			host, err := cgroupfs.OpenHost(o.HostRoot)
			if err != nil {
				return err
			}
			defer host.Close()
			interval := time.Duration(o.Interval)
			first, second := snapshot.NewRecorder(host), snapshot.NewRecorder(host)
			taken := time.Now()
			if err := scanOnce(first, taken); err != nil {
				return err
			}
			if interval > 0 {
				time.Sleep(interval)
				// Record the real time between the two scans' starts: on a
				// big node a scan takes a while, and rates computed over
				// the nominal interval would be too high.
				at := time.Now()
				if err := scanOnce(second, at); err != nil {
					return err
				}
				interval = at.Sub(taken)
			} else {
				second = nil
			}
			// Write to a temporary file in the same directory and rename,
			// so a failure never leaves a partial snapshot behind.
			tmp, err := os.CreateTemp(filepath.Dir(out), ".cgwarden-snapshot-*")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name())
			hostname, _ := os.Hostname()
			notes := []string{"captured by cgwarden snapshot on " + hostname}
			if note != "" {
				notes = append(notes, note)
			}
			if err := snapshot.Write(tmp, first, second, taken, interval, notes); err != nil {
				tmp.Close()
				return err
			}
			if err := tmp.Sync(); err != nil {
				tmp.Close()
				return err
			}
			if err := tmp.Close(); err != nil {
				return err
			}
			if err := os.Rename(tmp.Name(), out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "snapshot written to %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "file to write")
	cmd.Flags().StringVar(&note, "note", "", "a line of text to put in the snapshot's header")
	cmd.Flags().Var(&o.Interval, "interval", "time between the two samples (0 for one sample)")
	return cmd
}

func scanOnce(fsys cgroupfs.FS, now time.Time) error {
	sc, err := inventory.Open(fsys)
	if err != nil {
		return err
	}
	n, err := sc.Scan(now)
	if err != nil {
		return err
	}
	// Record the threads' run and wait times (tasks / cgroup.threads and
	// /proc/<tid>/task/<tid>/schedstat), so that audit and inspect --demand
	// can measure demand from the snapshot.
	_, _ = sc.ReadThreadTimes(n, now)
	// serve reads the node's memory from /proc/meminfo on cgroup v2 (the
	// root cgroup has no memory.current); record it so snapshots serve it.
	_, _ = fsys.ReadFile(aggregate.MeminfoPath)
	return nil
}
