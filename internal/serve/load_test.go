package serve_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// startServe runs `cgwarden serve` (this test binary acting as cgwarden,
// see TestMain) on the live host and returns its base URL and process.
func startServe(t testing.TB, args ...string) (string, *exec.Cmd) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return startServeBin(t, exe, args...)
}

// startServeBin is startServe with the cgwarden binary exe (a built one,
// or this test binary).
func startServeBin(t testing.TB, exe string, args ...string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(exe, append([]string{"serve", "--listen", "127.0.0.1:0", "--metadata", "none"}, args...)...)
	cmd.Env = append(os.Environ(), "CGWARDEN_RUN_CLI=1", "CGWARDEN_MEMORY_USER=")
	url := "http://" + realtest.StartServe(t, cmd)
	poll.Every(50*time.Millisecond).Until(t, 30*time.Second, "cgwarden serve ready", func() (bool, string, error) {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status, nil
	})
	return url, cmd
}

var scansRe = regexp.MustCompile(`(?m)^cgwarden_scans_total (\d+)$`)

func scans(t testing.TB, url string) int {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := scansRe.FindSubmatch(b)
	if m == nil {
		t.Fatalf("no cgwarden_scans_total in /metrics")
	}
	n, err := strconv.Atoi(string(m[1]))
	if err != nil {
		t.Fatalf("cgwarden_scans_total %q: %v", m[1], err)
	}
	return n
}

// 100 clients (20 under -race) scrape /metrics/resource as fast as they can for 10 s: no
// request fails, and cgwarden scans once per interval regardless. The
// figures (requests/s, cgwarden's CPU) are logged for docs/benchmarks.md.
func TestLoadHundredScrapers(t *testing.T) {
	// Nothing in it depends on the cgroup version, and it measures the
	// host, not an emulated guest.
	realtest.HostOnly(t, "a load test of the host")
	realtest.Require(t) // scans the live host's cgroups
	// Under -race (the race lane) the same races are looked for with a
	// fifth of the clients and a longer timeout: the raced server answers
	// a few requests a second on a loaded machine, and 100 clients' 10 s
	// timeouts measured that, not a failure.
	clients, timeout := 100, 10*time.Second
	if raceEnabled {
		clients, timeout = 20, 60*time.Second
	}
	const (
		duration = 10 * time.Second
		// Long enough that a scan of a busy host (hundreds of ms on a loaded
		// two-core machine) never overruns it.
		interval = 2 * time.Second
	)
	url, cmd := startServe(t, "--interval", interval.String())
	pid := cmd.Process.Pid

	// Idle baseline: what scanning alone costs over the same time.
	cpuIdle0, _ := realtest.ProcCPUSeconds(pid)
	time.Sleep(duration)
	cpuIdle1, _ := realtest.ProcCPUSeconds(pid)

	tr := &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients}
	hc := &http.Client{Transport: tr, Timeout: timeout}
	defer tr.CloseIdleConnections()

	s0 := scans(t, url)
	cpu0, _ := realtest.ProcCPUSeconds(pid)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				resp, err := hc.Get(url + "/metrics/resource")
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || !strings.Contains(string(b), "node_cpu_usage_seconds_total") {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, resp.Status)
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, _ := realtest.ProcCPUSeconds(pid)
	s1 := scans(t, url)

	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d requests failed (first: %v)", n, n+ok.Load(), firstErr.Load())
	}
	// Scans follow the clock, not the requests: never more than
	// elapsed/interval of them (give or take the one in progress at each
	// end), however many requests came. Fewer happen only when a scan
	// itself takes longer than the interval (a saturated machine; the
	// loop then skips rather than piles up), so the lower bound is loose.
	want := int(elapsed / interval)
	if got := s1 - s0; got > want+1 || got < want/2 {
		t.Errorf("%d scans in %s at --interval %s, want %d (at most %d, at least %d)", got, elapsed.Round(time.Millisecond), interval, want, want+1, want/2)
	}
	hwm := "?"
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				hwm = strings.TrimSpace(v)
			}
		}
	}
	t.Logf("load: %d clients, %d requests in %s = %.0f requests/s, %d scans; cgwarden CPU %.2f s under load vs %.2f s idle over %s; peak RSS %s",
		clients, ok.Load(), elapsed.Round(time.Millisecond), float64(ok.Load())/elapsed.Seconds(), s1-s0, cpu1-cpu0, cpuIdle1-cpuIdle0, duration, hwm)
}
