package serve_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/realtest"
)

// BenchmarkAgentSteadyState runs `cgwarden serve` (built and stripped as a
// release is) on the live host while the host holds an idle node of 60
// pods (a scratch kubepods tree, systemd driver names: each pod a sandbox
// and a container cgroup with a sleeping process in each), and measures:
//   - the agent's CPU per second at serve's default 10 s interval, with
//     steady-state scans (the default) and, as the baseline of the same
//     run, with --full-scans (every file read at every scan, as before);
//     CPU is the sum of the process's threads' run time
//     (/proc/PID/task/*/schedstat, ns), over 60 s after the first scan;
//   - its peak RSS (VmHWM) in both runs;
//   - scrape latency with 10 concurrent scrapers for 10 s, alternating
//     /metrics/resource and /stats/summary?only_cpu_and_memory=true, p50
//     and p99 as the scrapers see them: back to back, and paced at 10
//     requests per second each.
//
// It takes about 2.5 minutes; docs/benchmarks.md has the command.
func BenchmarkAgentSteadyState(b *testing.B) {
	s := realtest.NewScratch(b)
	idleNode(b, s, 60)
	// The binary as users run it (go build, stripped as a release is).
	bin := filepath.Join(b.TempDir(), "cgwarden")
	build := exec.Command("go", "build", "-ldflags=-s -w", "-o", bin, "github.com/cgwarden/cgwarden/cmd/cgwarden")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	const window = 60 * time.Second
	for _, mode := range []struct {
		name string
		args []string
	}{{"steady", nil}, {"full-scans", []string{"--full-scans"}}} {
		b.Run(mode.name, func(b *testing.B) {
			for b.Loop() {
				url, cmd := startServeBin(b, bin, append([]string{"--interval", "10s"}, mode.args...)...)
				pid := cmd.Process.Pid
				time.Sleep(time.Second) // past the first scan's tail
				cpu0 := threadsCPU(b, pid)
				t0 := time.Now()
				time.Sleep(window)
				cpu := float64(threadsCPU(b, pid)-cpu0) / 1e6 / time.Since(t0).Seconds()
				b.ReportMetric(cpu, "cpu-ms/s")
				b.ReportMetric(float64(vmHWM(b, pid))/1024, "peak-RSS-MiB")
				b.Logf("%s: %.3f CPU-ms/s over %s (%d scans), peak RSS %.1f MiB, %d pods served", mode.name, cpu, window, scans(b, url), float64(vmHWM(b, pid))/1024, pods(b, url))
			}
		})
	}
	// Scrapers back to back (as fast as the two CPUs they share with
	// the agent allow: a stress test), then paced at 10 requests per
	// second each (a hundred Prometheus servers' worth of load).
	for _, pace := range []time.Duration{0, 100 * time.Millisecond} {
		b.Run(fmt.Sprintf("scrape/pause=%s", pace), func(b *testing.B) {
			for b.Loop() {
				url, _ := startServeBin(b, bin, "--interval", "10s")
				lat := scrapeLatencies(b, url, 10, 10*time.Second, pace)
				slices.Sort(lat)
				q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
				b.ReportMetric(float64(q(0.5).Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(q(0.99).Microseconds())/1000, "p99-ms")
				b.Logf("10 scrapers, pause %s, %d requests in 10 s: p50 %s, p99 %s, max %s", pace, len(lat), q(0.5), q(0.99), lat[len(lat)-1])
			}
		})
	}
}

// idleNode builds pods pods in s, each a sandbox and a container cgroup
// with a sleeping process in each, and kills the processes before the
// scratch removes the tree.
func idleNode(b *testing.B, s *realtest.Scratch, pods int) {
	s.Mkdir("kubepods.slice")
	s.Mkdir("kubepods.slice/kubepods-besteffort.slice")
	s.Mkdir("kubepods.slice/kubepods-burstable.slice")
	for p := range pods {
		uid := fmt.Sprintf("%08x_aaaa_4bbb_8ccc_%012x", p, p)
		pod := []string{"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod", "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod", "kubepods.slice/kubepods-pod"}[p%3] + uid + ".slice"
		s.Mkdir(pod)
		for c := range 2 {
			rel := fmt.Sprintf("%s/cri-containerd-%056x%08x.scope", pod, p, c)
			s.Mkdir(rel)
			s.Start(rel, "sleep", "3600")
		}
	}
}

// threadsCPU is the run time of all pid's threads, in ns.
func threadsCPU(b *testing.B, pid int) int64 {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var sum int64
	for _, t := range tasks {
		raw, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(raw))
		if len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			sum += n
		}
	}
	return sum
}

// vmHWM is pid's peak resident set size, in KiB.
func vmHWM(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	b.Fatal("no VmHWM")
	return 0
}

// pods is the number of pods /stats/summary lists.
func pods(b *testing.B, url string) int {
	resp, err := http.Get(url + "/stats/summary?only_cpu_and_memory=true")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return strings.Count(string(body), `"podRef"`)
}

// scrapeLatencies runs n scrapers for d, each pausing pause between its
// requests, and returns every request's latency; a failed request fails
// the benchmark.
func scrapeLatencies(b *testing.B, url string, n int, d, pause time.Duration) []time.Duration {
	tr := &http.Transport{MaxIdleConns: n, MaxIdleConnsPerHost: n}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	var failure error
	for i := range n {
		wg.Go(func() {
			paths := []string{"/metrics/resource", "/stats/summary?only_cpu_and_memory=true"}
			var mine []time.Duration
			for j := i; ctx.Err() == nil; j++ {
				t0 := time.Now()
				resp, err := hc.Get(url + paths[j%2])
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("%s: %s", paths[j%2], resp.Status)
					}
				}
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						failure = err
						mu.Unlock()
					}
					break
				}
				mine = append(mine, time.Since(t0))
				time.Sleep(pause)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if failure != nil {
		b.Fatal(failure)
	}
	return all
}
