package serve_test

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cgwarden/cgwarden/internal/realtest"
)

var (
	agentBinaries = flag.String("agent-binaries", "", "BenchmarkAgentBinaries: name=path,... of cgwarden binaries to run side by side; the first is the baseline")
	agentWindow   = flag.Duration("agent-window", 60*time.Second, "BenchmarkAgentBinaries: how long each binary is measured (a scan every 10 s)")
)

// BenchmarkAgentBinaries runs given cgwarden binaries (two builds to
// compare: a baseline first) as `serve --interval 10s --metadata none`
// side by side on the live host while it holds the idle node of
// BenchmarkAgentSteadyState (60 pods), and measures each over the same
// window (-agent-window, 60 s by default): CPU per second (its threads'
// run time), peak RSS (VmHWM) and the RSS split into anonymous memory
// (heap, stacks) and file pages (the binary's code and data that the
// process touched). Each binary is
// dropped from the page cache before the start, so that none has its
// file pages mapped more eagerly than another (the kernel maps cached
// neighbours of a faulted page: a binary just written, or just read
// whole, shows a larger RssFile). Ratios are against the first binary.
// docs/benchmarks.md has the command.
func BenchmarkAgentBinaries(b *testing.B) {
	if *agentBinaries == "" {
		b.Skip("no -agent-binaries")
	}
	type bin struct{ name, path string }
	var bins []bin
	for _, nv := range strings.Split(*agentBinaries, ",") {
		n, p, ok := strings.Cut(nv, "=")
		if !ok {
			b.Fatalf("-agent-binaries %q: want name=path", nv)
		}
		bins = append(bins, bin{n, p})
	}
	s := realtest.NewScratch(b)
	idleNode(b, s, 60)
	window := *agentWindow
	for b.Loop() {
		type result struct {
			cpu                  float64
			hwm, anon, fileBytes int64
		}
		res := make([]result, len(bins))
		var wg sync.WaitGroup
		for i, x := range bins {
			evict(b, x.path)
			_, cmd := startServeBin(b, x.path, "--interval", "10s")
			pid := cmd.Process.Pid
			wg.Go(func() {
				time.Sleep(12 * time.Second) // past the first scan and the second
				cpu0 := threadsCPU(b, pid)
				t0 := time.Now()
				time.Sleep(window)
				res[i].cpu = float64(threadsCPU(b, pid)-cpu0) / 1e6 / time.Since(t0).Seconds()
				res[i].hwm, res[i].anon, res[i].fileBytes = status(b, pid, "VmHWM"), status(b, pid, "RssAnon"), status(b, pid, "RssFile")
			})
		}
		wg.Wait()
		for i, x := range bins {
			r := res[i]
			b.Logf("%s: %.3f CPU-ms/s (%.2f× %s), peak RSS %.1f MiB (%.2f×), RssAnon %.1f MiB, RssFile %.1f MiB", x.name,
				r.cpu, r.cpu/res[0].cpu, bins[0].name, float64(r.hwm)/1024, float64(r.hwm)/float64(res[0].hwm), float64(r.anon)/1024, float64(r.fileBytes)/1024)
			b.ReportMetric(r.cpu, x.name+"-cpu-ms/s")
			b.ReportMetric(float64(r.hwm)/1024, x.name+"-peak-RSS-MiB")
		}
	}
}

// evict drops the file at p from the page cache.
func evict(b *testing.B, p string) {
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatalf("evicting %s: %v", p, err)
	}
}

// status is a kB field of pid's /proc status.
func status(b *testing.B, pid int, key string) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}
