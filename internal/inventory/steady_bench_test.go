package inventory_test

import (
	"fmt"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/stats"
)

// BenchmarkSteadyScan measures the agent's scan in its steady state (a
// Scanner with a Steady, scanning the same tree again) against two
// baselines in the same run, rounds interleaved:
//   - reads-only floor: the I/O a steady scan cannot avoid, with no
//     parsing and no node built: one pread(2) from offset 0 on a
//     descriptor opened beforehand for each counter file of each cgroup
//     and /proc/meminfo, and open+read+close for the v1 pid lists
//     (cgroup.procs, tasks), which v1 serves stale through a kept
//     descriptor (see stats.Reader), where a scan reads them (as the
//     agent scans, Scanner.ProcsWhereUsed: cgroup.procs only where a
//     count is used, none on these trees);
//   - full scan: Scanner.Scan without a Steady, as every scan was before.
//
// Trees: 60 pods × (sandbox + 1 container) with a sleeping process in
// each, an idle node, and 250 pods × 4 empty containers (1,000 container
// cgroups, whose empty pid lists pids.current spares).
func BenchmarkSteadyScan(b *testing.B) {
	for _, shape := range []struct{ pods, perPod int }{{60, 2}, {250, 4}} {
		b.Run(fmt.Sprintf("pods=%d×%d", shape.pods, shape.perPod), func(b *testing.B) {
			s := realtest.NewScratch(b)
			cgroups := benchPods(b, s, shape.pods, shape.perPod)
			if shape.perPod == 2 {
				// An idle node: a sleeping process in every sandbox and
				// container, so every pid list up the tree is read.
				busyContainers(b, s, shape.pods*shape.perPod)
			}
			full, err := inventory.Open(s.Host)
			if err != nil {
				b.Fatal(err)
			}
			// Both scan as the agent does (with and without
			// --full-scans): process lists only where a count is used.
			full.Base, full.ProcsWhereUsed = s.Name, true
			steady, err := inventory.Open(s.Host)
			if err != nil {
				b.Fatal(err)
			}
			steady.Base, steady.ProcsWhereUsed = s.Name, true
			st, err := inventory.NewSteady(steady, s.Host, inventory.SteadyOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()

			// The floor's files: what a full scan reads, less settings.
			rec := &recordingFS{fs: s.Host}
			full.FS = rec
			n, err := full.Scan(time.Now())
			if err != nil || n.Cgroups != cgroups+1 {
				b.Fatalf("scan: %v (%d cgroups, want %d)", err, n.Cgroups, cgroups+1)
			}
			full.FS = s.Host
			fl := newFloor(b, rec.files, steady.Places, n)
			defer fl.close()
			b.Logf("%d cgroups; per steady scan the floor preads %d files and opens %d pid lists", cgroups+1, len(fl.fds), len(fl.opened))
			// First steady scan: opens and watches everything.
			if _, err := steady.Scan(time.Now()); err != nil {
				b.Fatal(err)
			}

			var floorCPU, steadyCPU, fullCPU []float64
			for range benchRounds {
				b.Run("floor", func(b *testing.B) {
					cpu0 := processCPU(b)
					for b.Loop() {
						fl.read(b)
					}
					floorCPU = append(floorCPU, float64(processCPU(b)-cpu0)/float64(b.N))
					b.ReportMetric(floorCPU[len(floorCPU)-1], "cpu-ns/op")
				})
				b.Run("steady", func(b *testing.B) {
					b.ReportAllocs()
					cpu0 := processCPU(b)
					for b.Loop() {
						if _, err := steady.Scan(time.Now()); err != nil {
							b.Fatal(err)
						}
					}
					steadyCPU = append(steadyCPU, float64(processCPU(b)-cpu0)/float64(b.N))
					b.ReportMetric(steadyCPU[len(steadyCPU)-1], "cpu-ns/op")
					b.ReportMetric(steadyCPU[len(steadyCPU)-1]/floorCPU[len(floorCPU)-1], "x-floor-cpu")
				})
				b.Run("full", func(b *testing.B) {
					b.ReportAllocs()
					cpu0 := processCPU(b)
					for b.Loop() {
						if _, err := full.Scan(time.Now()); err != nil {
							b.Fatal(err)
						}
					}
					fullCPU = append(fullCPU, float64(processCPU(b)-cpu0)/float64(b.N))
					b.ReportMetric(fullCPU[len(fullCPU)-1], "cpu-ns/op")
					b.ReportMetric(fullCPU[len(fullCPU)-1]/steadyCPU[len(steadyCPU)-1], "x-steady-cpu")
				})
			}
			med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
			var xf, xs []float64
			for i := range steadyCPU {
				xf = append(xf, steadyCPU[i]/floorCPU[i])
				xs = append(xs, fullCPU[i]/steadyCPU[i])
			}
			c := st.Counts()
			b.Logf("medians over %d rounds: floor %.2f ms, steady %.2f ms, full %.2f ms CPU per scan; steady/floor %.2f (min %.2f max %.2f); full/steady %.1f (min %.1f max %.1f); %s; %d watches",
				benchRounds, med(floorCPU)/1e6, med(steadyCPU)/1e6, med(fullCPU)/1e6, med(xf), slices.Min(xf), slices.Max(xf), med(xs), slices.Min(xs), slices.Max(xs), c.Kept, c.Watches)
		})
	}
}

// floor is the reads-only floor of a steady scan.
type floor struct {
	fds    []int
	opened []string
	buf    []byte
}

// newFloor opens the files a steady scan reads at every scan among files
// (those a full scan of n read): not settings, not v1 throttling counters
// of a cgroup without a quota (kept with its settings), pid lists only
// where pids.current is not 0 (as a full scan). On v1 it notes the pid
// lists to open each time.
func newFloor(b *testing.B, files []string, places mounts.Places, n *inventory.Node) *floor {
	f := &floor{buf: make([]byte, 64<<10)}
	for _, p := range append(files, inventory.MeminfoPath) {
		name := path.Base(p)
		switch {
		case stats.IsSettingsFile(name), p == inventory.MountinfoPath, p == inventory.CPUOnlinePath:
		case !places.V2 && name == "cpu.stat" && noQuota(n, strings.TrimPrefix(path.Dir(p), places.CPU)):
		case !places.V2 && (name == "cgroup.procs" || name == "tasks"):
			f.opened = append(f.opened, p)
		default:
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			f.fds = append(f.fds, fd)
		}
	}
	return f
}

func (f *floor) read(b *testing.B) {
	for _, fd := range f.fds {
		// One pread per file, as a steady scan makes (see
		// cgroupfs.Kept): a seq_file fills the buffer if it can.
		for off := 0; ; {
			n, err := unix.Pread(fd, f.buf[off:], int64(off))
			if err != nil {
				b.Fatal(err)
			}
			off += n
			if n == 0 || off < len(f.buf) {
				break
			}
		}
	}
	floorRead(b, f.opened, nil, f.buf)
}

func (f *floor) close() {
	for _, fd := range f.fds {
		unix.Close(fd)
	}
}

// busyContainers starts a sleeping process in each of the want container
// cgroups of s's tree.
func busyContainers(b *testing.B, s *realtest.Scratch, want int) {
	n, err := func() (*inventory.Node, error) {
		sc, err := inventory.Open(s.Host)
		if err != nil {
			return nil, err
		}
		sc.Base = s.Name
		return sc.Scan(time.Now())
	}()
	if err != nil {
		b.Fatal(err)
	}
	var started []*exec.Cmd
	// Killed before the tree's removal (cleanups run last first), which
	// would otherwise find its cgroups busy.
	b.Cleanup(func() {
		for _, cmd := range started {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	n.Root.Walk(func(c *inventory.Cgroup) {
		if len(c.Children) == 0 && strings.HasSuffix(c.Path, ".scope") {
			started = append(started, s.Start(strings.TrimPrefix(c.Path, s.Name+"/"), "sleep", "3600"))
		}
	})
	if len(started) != want {
		b.Fatalf("started %d sleepers, want %d", len(started), want)
	}
}

// noQuota reports whether cgroup cg of n has no CPU quota.
func noQuota(n *inventory.Node, cg string) bool {
	if cg == "" {
		cg = "/"
	}
	c := n.Find(cg)
	return c != nil && c.Stats.CPU.QuotaUs != nil && *c.Stats.CPU.QuotaUs == stats.Unlimited
}
