package inventory_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// Benchmarks on the live kernel (docs/benchmarks.md has the commands and
// figures). They build a kubelet tree with the systemd driver's names in a
// scratch cgroup: pods spread over the three QoS classes, four container
// cgroups each, all empty (an empty cgroup has every file a busy one has).
// Building it is slow (a v1 memory cgroup takes milliseconds to create), so
// each benchmark function builds its tree once and runs its sub-benchmarks
// on it.

const containersPerPod = 4

// benchTree creates pods×4 container cgroups in s and returns how many
// cgroups it made (including the kubepods root and tiers).
func benchTree(b *testing.B, s *realtest.Scratch, containers int) int {
	b.Helper()
	return benchPods(b, s, containers/containersPerPod, containersPerPod)
}

// benchPods creates pods with perPod container cgroups each in s and
// returns how many cgroups it made (including the kubepods root and
// tiers).
func benchPods(b *testing.B, s *realtest.Scratch, pods, perPod int) int {
	b.Helper()
	containers := pods * perPod
	start := time.Now()
	var rels []string
	add := func(rel string) { rels = append(rels, rel) }
	add("kubepods.slice")
	add("kubepods.slice/kubepods-burstable.slice")
	add("kubepods.slice/kubepods-besteffort.slice")
	for p := 0; p < pods; p++ {
		uid := fmt.Sprintf("%08x_%04x_%04x_%04x_%012x", p, p%0x10000, 0x4000, 0x8000, p)
		var pod string
		switch p % 3 {
		case 0:
			pod = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid + ".slice"
		case 1:
			pod = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid + ".slice"
		default:
			pod = "kubepods.slice/kubepods-pod" + uid + ".slice"
		}
		add(pod)
		for c := 0; c < perPod; c++ {
			add(fmt.Sprintf("%s/cri-containerd-%056x%08x.scope", pod, p, c))
		}
	}
	// s.Mkdir creates in one hierarchy after another, one directory at a
	// time; the hierarchies are independent, so make them concurrently.
	mkdirAll(b, s, rels)
	b.Logf("built %d cgroups (%d containers) in each of %d hierarchies in %s", len(rels), containers, len(s.Points), time.Since(start).Round(time.Millisecond))
	return len(rels)
}

// mkdirAll creates rels (parents first) beneath the scratch in every
// hierarchy, one goroutine per hierarchy, and registers their removal
// (children first), which runs before the scratch's own cleanup.
func mkdirAll(b *testing.B, s *realtest.Scratch, rels []string) {
	if s.V2() {
		// v2 needs the controllers enabled in every parent, as a runtime
		// does; s.Mkdir does that.
		for _, r := range rels {
			s.Mkdir(r)
		}
		return
	}
	var mu sync.Mutex
	made := map[string][]string{}
	b.Cleanup(func() {
		var wg sync.WaitGroup
		for _, pt := range s.Points {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dirs := made[pt]
				for i := len(dirs) - 1; i >= 0; i-- {
					if err := s.Host.Rmdir(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
						b.Errorf("bench cleanup: %v", err)
					}
				}
			}()
		}
		wg.Wait()
	})
	var wg sync.WaitGroup
	errs := make(chan error, len(s.Points))
	for _, pt := range s.Points {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, r := range rels {
				d := path.Join(pt, s.Name, r)
				if err := s.Host.Mkdir(d); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				made[pt] = append(made[pt], d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("bench mkdir: %v", err)
	}
}

// recordingFS notes every path a scan reads, in order, and whether the read
// succeeded: the floor reads exactly the successful ones.
type recordingFS struct {
	fs           cgroupfs.FS
	files, dirs  []string
	failedReads  int
	failedListed int
}

func (r *recordingFS) ReadFile(p string) ([]byte, error) {
	b, err := r.fs.ReadFile(p)
	if err != nil {
		r.failedReads++
	} else {
		r.files = append(r.files, p)
	}
	return b, err
}

func (r *recordingFS) ReadDirs(p string) ([]string, error) {
	names, err := r.fs.ReadDirs(p)
	if err != nil {
		r.failedListed++
	} else {
		r.dirs = append(r.dirs, p)
	}
	return names, err
}

// floorRead reads every file with open/read/close into one reused buffer
// and lists every directory with open/getdents/close, parsing nothing: the
// least any scanner must do to see the same bytes.
func floorRead(b *testing.B, files, dirs []string, buf []byte) {
	for _, d := range dirs {
		fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		for {
			n, err := unix.Getdents(fd, buf)
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
		unix.Close(fd)
	}
	for _, f := range files {
		fd, err := unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		for {
			n, err := unix.Read(fd, buf)
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
		unix.Close(fd)
	}
}

// BenchmarkScan measures the steady-state full scan of a scratch tree (the
// agent's repeated Scan with one Scanner) against the floor of reading the
// same files and listing the same directories in the same run. The scan's
// sub-benchmark reports its ratio to the floor as x-floor.
func BenchmarkScan(b *testing.B) {
	for _, containers := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("containers=%d", containers), func(b *testing.B) {
			s := realtest.NewScratch(b)
			cgroups := benchTree(b, s, containers)
			sc, err := inventory.Open(s.Host)
			if err != nil {
				b.Fatal(err)
			}
			sc.Base = s.Name
			rec := &recordingFS{fs: s.Host}
			sc.FS = rec
			n, err := sc.Scan(time.Now())
			if err != nil {
				b.Fatal(err)
			}
			sc.FS = s.Host
			if got := len(n.Pods); got != containers/containersPerPod {
				b.Fatalf("scan found %d pods, want %d", got, containers/containersPerPod)
			}
			if len(n.Errors) > 0 {
				b.Fatalf("scan errors: %v", n.Errors[0])
			}
			b.Logf("%d cgroups walked; a scan reads %d files and lists %d directories (%d reads and %d listings failed)",
				n.Cgroups, len(rec.files), len(rec.dirs), rec.failedReads, rec.failedListed)
			if n.Cgroups != cgroups+1 {
				b.Fatalf("walked %d cgroups, built %d", n.Cgroups, cgroups)
			}

			// Rounds of floor then scan, interleaved, so that both see the
			// same machine: on a shared host the load drifts between runs.
			buf := make([]byte, 64<<10)
			var ratios, cpuRatios []float64
			for range benchRounds {
				var floorNs, floorCPU float64
				b.Run("floor", func(b *testing.B) {
					b.ReportAllocs()
					cpu0 := processCPU(b)
					for b.Loop() {
						floorRead(b, rec.files, rec.dirs, buf)
					}
					floorCPU = float64(processCPU(b)-cpu0) / float64(b.N)
					floorNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
					b.ReportMetric(floorCPU, "cpu-ns/op")
					b.ReportMetric(float64(len(rec.files)+len(rec.dirs)), "reads/op")
				})
				b.Run("scan", func(b *testing.B) {
					b.ReportAllocs()
					cpu0 := processCPU(b)
					for b.Loop() {
						if _, err := sc.Scan(time.Now()); err != nil {
							b.Fatal(err)
						}
					}
					cpu := float64(processCPU(b)-cpu0) / float64(b.N)
					ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
					b.ReportMetric(cpu, "cpu-ns/op")
					if floorNs > 0 && floorCPU > 0 {
						b.ReportMetric(ns/floorNs, "x-floor")
						b.ReportMetric(cpu/floorCPU, "x-floor-cpu")
						ratios = append(ratios, ns/floorNs)
						cpuRatios = append(cpuRatios, cpu/floorCPU)
					}
					b.ReportMetric(ns/float64(cgroups+1), "ns/cgroup")
				})
			}
			if len(ratios) > 0 {
				slices.Sort(ratios)
				slices.Sort(cpuRatios)
				b.Logf("scan/floor over %d rounds: wall time median %.2f (min %.2f, max %.2f); CPU time median %.2f (min %.2f, max %.2f)",
					len(ratios), ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1],
					cpuRatios[len(cpuRatios)/2], cpuRatios[0], cpuRatios[len(cpuRatios)-1])
			}
		})
	}
}

// processCPU is the CPU time (user + system, all threads, so the garbage
// collector's too) the process has used, in ns. On a shared machine it is
// steadier than wall time, which also counts waiting for a CPU.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchRounds is how many interleaved floor/scan pairs BenchmarkScan runs
// per tree size (use -count 1).
const benchRounds = 5

// BenchmarkPeakRSS builds 1,000 container cgroups and runs whole processes
// on the live host, whose tree then holds the scratch's kubepods.slice,
// reporting each child's peak RSS (ru_maxrss, the figure /usr/bin/time -v
// prints as "Maximum resident set size"):
//   - the cgwarden binary, built as `go build` does by default and stripped
//     (-ldflags=-s -w, as a release is built): `--help` (what the binary
//     costs before it reads anything), `inspect -o json` (two scans one
//     --interval apart, as a user runs it), `inspect` (text) and
//     `inspect -o json --interval 0` (one scan);
//   - this test binary re-executed as a scan-only process: Open, two scans
//     of the scratch and Rate, nothing else linked in but the test
//     framework — the scan's own share.
func BenchmarkPeakRSS(b *testing.B) {
	s := realtest.NewScratch(b)
	cgroups := benchTree(b, s, 1000)
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("scan-only", func(b *testing.B) {
		peakRSS(b, exe, []string{"-test.run=^$"}, []string{helperEnv + "=scan", scanBaseEnv + "=" + s.Name}, cgroups)
	})
	for _, build := range []struct{ name, ldflags string }{{"default", ""}, {"stripped", "-s -w"}} {
		bin := filepath.Join(b.TempDir(), "cgwarden")
		cmd := exec.Command(gobin, "build", "-ldflags="+build.ldflags, "-o", bin, "github.com/cgwarden/cgwarden/cmd/cgwarden")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Skipf("cannot build cgwarden (needs the Go toolchain): %v\n%s", err, out)
		}
		for _, args := range [][]string{
			{"--help"},
			{"inspect", "-o", "json"},
			{"inspect"},
			{"inspect", "-o", "json", "--interval", "0"},
		} {
			want := cgroups // the host's whole tree holds the scratch's
			if args[0] == "--help" {
				want = 0
			}
			b.Run(build.name+"/"+strings.Join(args, "_"), func(b *testing.B) {
				peakRSS(b, bin, args, nil, want)
			})
		}
	}
}

// cgroupCount finds the number of cgroups walked in inspect's text or JSON
// output or the scan-only helper's line.
var cgroupCount = regexp.MustCompile(`(\d+) cgroups|"cgroups": (\d+)`)

// peakRSS runs bin with args (and env added) b.N times and reports the
// highest ru_maxrss; the output must show at least atLeast cgroups walked.
func peakRSS(b *testing.B, bin string, args, env []string, atLeast int) {
	var peak int64
	var out strings.Builder
	for b.Loop() {
		out.Reset()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Run(); err != nil {
			b.Fatalf("%s %s: %v", bin, strings.Join(args, " "), err)
		}
		peak = max(peak, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) // KiB on Linux
	}
	if args[0] == "-test.run=^$" {
		b.Log(strings.TrimSpace(out.String()))
	}
	if atLeast > 0 {
		m := cgroupCount.FindStringSubmatch(out.String())
		if m == nil {
			b.Fatalf("%s %s: no cgroup count in its output:\n%.2000s", bin, strings.Join(args, " "), out.String())
		}
		if n, _ := strconv.Atoi(m[1] + m[2]); n < atLeast {
			b.Fatalf("%s %s walked %d cgroups, want at least %d", bin, strings.Join(args, " "), n, atLeast)
		}
	}
	b.ReportMetric(float64(peak)/1024, "peak-RSS-MiB")
}

// BenchmarkFloorByFile splits the floor of a 1,000-container scan by file
// name: what the kernel charges for producing each kind of file, over all
// the cgroups that have it. It shows where a scan's time goes when the
// floor dominates.
func BenchmarkFloorByFile(b *testing.B) {
	s := realtest.NewScratch(b)
	benchTree(b, s, 1000)
	sc, err := inventory.Open(s.Host)
	if err != nil {
		b.Fatal(err)
	}
	sc.Base = s.Name
	rec := &recordingFS{fs: s.Host}
	sc.FS = rec
	if _, err := sc.Scan(time.Now()); err != nil {
		b.Fatal(err)
	}
	byName := map[string][]string{}
	var names []string
	for _, f := range rec.files {
		n := path.Base(f)
		if byName[n] == nil {
			names = append(names, n)
		}
		byName[n] = append(byName[n], f)
	}
	buf := make([]byte, 64<<10)
	b.Run("directories", func(b *testing.B) {
		for b.Loop() {
			floorRead(b, nil, rec.dirs, buf)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(rec.dirs)), "ns/read")
	})
	for _, n := range names {
		b.Run(n, func(b *testing.B) {
			for b.Loop() {
				floorRead(b, byName[n], nil, buf)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(byName[n])), "ns/read")
		})
	}
}
