package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// snapshotFlags are snapshot's flags.
type snapshotFlags struct {
	file, out, note string
	force           bool
}

func newSnapshot(o *Options) *cobra.Command {
	var sf snapshotFlags
	cmd := &cobra.Command{
		Use:   "snapshot -f FILE",
		Short: "Capture everything cgwarden reads from this node into one file (for bug reports and --snapshot)",
		Long: `snapshot records every file cgwarden reads from this node (cgroup files, thread times, the
mounts, the CPUs, what fix plans from) in two samples --interval apart, into one text file that
any read command replays with --snapshot FILE. The file ends with a section holding its section
count and SHA-256, so a file cut short or edited is refused instead of replayed as another node.
-f - writes it to stdout. An existing file is not overwritten without --force.`,
		Example: `  cgwarden snapshot -f node.snapshot
  cgwarden snapshot -f - --interval 5s | gzip > node.snapshot.gz
  cgwarden audit --snapshot node.snapshot`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSnapshot(cmd.OutOrStdout(), cmd.ErrOrStderr(), o, &sf)
		},
	}
	cmd.Flags().StringVarP(&sf.file, "file", "f", "", "write the snapshot to this `FILE` (- for stdout)")
	cmd.Flags().StringVarP(&sf.out, "output", "o", "", "the same as -f `FILE` (kept for old scripts; never a format, nor -)")
	_ = cmd.Flags().MarkDeprecated("output", "use -f FILE (-f - for stdout)")
	cmd.Flags().BoolVar(&sf.force, "force", false, "overwrite the file if it exists")
	cmd.Flags().StringVar(&sf.note, "note", "", "a line of text to put in the snapshot's header")
	cmd.Flags().Var(&o.Interval, "interval", "time between the two samples (0 for one sample)")
	return cmd
}

// target is the file the flags name ("-" for stdout), checked before
// anything is captured.
func (sf *snapshotFlags) target(o *Options) (string, error) {
	file := sf.file
	if sf.out != "" {
		if file != "" {
			return "", fmt.Errorf("-o and -f both name the file: give -f FILE only")
		}
		switch sf.out {
		case "-", "text", "json", "yaml":
			// -o is the output format in every other command: never
			// write a file named after one.
			return "", fmt.Errorf("-o %s: snapshot writes one format to a file; give the file with -f FILE (-f - for stdout)", sf.out)
		}
		file = sf.out
	}
	if file == "" {
		return "", fmt.Errorf("-f FILE is required (-f - for stdout)")
	}
	if o.Snapshot != "" {
		return "", fmt.Errorf("snapshot reads the live host; --snapshot makes no sense here")
	}
	if file != "-" && !sf.force {
		if _, err := os.Lstat(file); err == nil {
			return "", fmt.Errorf("%s exists: give --force to overwrite it", file)
		}
	}
	return file, nil
}

// runSnapshot captures the node and writes the snapshot where the flags
// say.
func runSnapshot(stdout, stderr io.Writer, o *Options, sf *snapshotFlags) error {
	file, err := sf.target(o)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := capture(&buf, o, sf.note); err != nil {
		return err
	}
	if file == "-" {
		_, err := stdout.Write(buf.Bytes())
		return err
	}
	if err := writeFile(file, buf.Bytes(), sf.force); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "snapshot written to %s\n", file)
	return nil
}

// capture takes the node's two samples and writes the snapshot to w.
func capture(w io.Writer, o *Options, note string) error {
	host, err := cgroupfs.OpenHost(o.HostRoot)
	if err != nil {
		return err
	}
	defer host.Close()
	interval := time.Duration(o.Interval)
	first, second := snapshot.NewRecorder(host), snapshot.NewRecorder(host)
	// The threads' run and wait times are recorded (tasks or
	// cgroup.threads, /proc/<tid>/task/<tid>/schedstat), so that audit and
	// inspect --demand can measure demand from the snapshot.
	smp := &inventory.Sampling{Demand: true}
	taken := time.Now()
	if err := record(smp, first, taken); err != nil {
		return err
	}
	if interval > 0 {
		o.progress("taking the second sample").wait(interval)
		// Record the real time between the two scans' starts: on a big
		// node a scan takes a while, and rates computed over the nominal
		// interval would be too high.
		at := time.Now()
		if err := record(smp, second, at); err != nil {
			return err
		}
		interval = at.Sub(taken)
	} else {
		second = nil
	}
	hostname, _ := os.Hostname()
	notes := []string{"captured by cgwarden snapshot on " + hostname}
	if note != "" {
		notes = append(notes, note)
	}
	return snapshot.Write(w, first, second, taken, interval, notes)
}

// writeFile writes data to file through a temporary file in the same
// directory, so a failure never leaves a partial snapshot behind. Without
// force it links the file into place, which fails if the name was taken
// meanwhile, instead of renaming over it.
func writeFile(file string, data []byte, force bool) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), ".cgwarden-snapshot-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if force {
		return os.Rename(tmp.Name(), file)
	}
	if err := os.Link(tmp.Name(), file); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s exists: give --force to overwrite it", file)
		}
		return err
	}
	return nil
}

// record takes one sample of fsys (a recorder) through the loop every
// reader of the snapshot uses, so it records what they read: the tree,
// /proc/meminfo and, with Demand, the threads.
func record(smp *inventory.Sampling, fsys cgroupfs.FS, now time.Time) error {
	sc, err := inventory.Open(fsys)
	if err != nil {
		return err
	}
	n, err := smp.Take(sc, now)
	if err != nil {
		return err
	}
	// Record what fix reads to plan (cgroup.controllers,
	// cgroup.subtree_control, the current values it would copy), so that
	// fix --snapshot plans what the live node would need, no more. The
	// plan itself is thrown away; nothing is written.
	_, _, _ = plan.Adopt(plan.Input{Node: n, Places: sc.Places, FS: readOnly{fsys}, RemoveEmptySource: true,
		PlanUnconfirmed: true, Owned: func(string) bool { return true }}) // as if cgwarden made every target: read on instead of stopping
	return nil
}
