package serve_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/serve"
)

const (
	liveUID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	liveCtr = "5a1b2c3d4e5f60718293a4b5c6d7e8f90123456789abcdef0123456789abcdef"
	memMiB  = 64
)

var liveSlice = "kubepods-pod" + strings.ReplaceAll(liveUID, "-", "_") + ".slice"

// liveRun starts a CPU burner and a memory user in rel, serves two scans
// of the scratch 3 s apart, and returns what the endpoints said beside the
// raw scans and the CPU the processes used per /proc.
type liveRun struct {
	first, second *inventory.Node
	res1, res2    map[string]*dto.MetricFamily
	summary       statsapi.Summary
	procCores     float64
}

func runLive(t *testing.T, s *realtest.Scratch, rel string) liveRun {
	t.Helper()
	return runLiveWith(t, s, rel, nil)
}

// runLiveWith is runLive with pod metadata (nil: none).
func runLiveWith(t *testing.T, s *realtest.Scratch, rel string, meta *metadata.Set) liveRun {
	t.Helper()
	// Not pinned: other tests pin their burners to CPU 0, and this one
	// measures accounting, not contention.
	burner := s.Burn(rel, -1)
	t.Setenv("CGWARDEN_MEMORY_USER", "64")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	mem := s.Start(rel, exe, "-test.run=^$")
	// Let the memory user allocate before the window opens.
	waitRSS(t, mem, memMiB<<20)

	sc, err := inventory.Open(s.Host)
	if err != nil {
		t.Fatal(err)
	}
	sc.Base = s.Name
	// As the node loop (package agent) scans and feeds the Server.
	sampling := &inventory.Sampling{Meta: meta, Clock: time.Now}
	srv := serve.New(serve.Config{NodeName: "live"})
	scan := func(now time.Time) *inventory.Node {
		n, err := sampling.Take(sc, now)
		srv.Scanned(serve.Scan{Node: n, Meta: meta}, time.Since(now), err)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	var r liveRun
	cpu := func() float64 {
		a, err := realtest.ProcCPUSeconds(burner.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		b, err := realtest.ProcCPUSeconds(mem.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		return a + b
	}
	c0 := cpu()
	t0 := time.Now()
	r.first = scan(t0)
	r.res1 = scrape(t, ts.URL)
	time.Sleep(3 * time.Second)
	c1 := cpu()
	t1 := time.Now()
	r.second = scan(t1)
	r.res2 = scrape(t, ts.URL)
	r.procCores = (c1 - c0) / t1.Sub(t0).Seconds()

	resp, err := http.Get(ts.URL + "/stats/summary?only_cpu_and_memory=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r.summary); err != nil {
		t.Fatal(err)
	}
	if r.procCores < 0.1 {
		t.Fatalf("the burner used only %.2f cores; the machine is too busy for this test", r.procCores)
	}
	return r
}

func waitRSS(t *testing.T, cmd *exec.Cmd, bytes int) {
	t.Helper()
	poll.Every(20*time.Millisecond).Until(t, 10*time.Second, fmt.Sprintf("memory user at %d bytes resident", bytes), func() (bool, string, error) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/statm")
		if err != nil {
			return false, err.Error(), nil
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return false, "", fmt.Errorf("malformed statm %q", b)
		}
		pages, err := strconv.Atoi(f[1])
		return err == nil && pages*4096 >= bytes, fmt.Sprintf("statm %q", b), nil
	})
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics/resource")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("/metrics/resource does not parse: %v\n%s", err, body)
	}
	return mfs
}

// sample finds the value and timestamp of name{pod=pod}.
func sample(t *testing.T, mfs map[string]*dto.MetricFamily, name, pod string) (float64, int64) {
	t.Helper()
	mf, ok := mfs[name]
	if !ok {
		t.Fatalf("no %s", name)
	}
	for _, m := range mf.Metric {
		for _, l := range m.Label {
			if l.GetName() == "pod" && l.GetValue() == pod {
				v := m.GetCounter().GetValue()
				if m.Gauge != nil {
					v = m.GetGauge().GetValue()
				}
				return v, m.GetTimestampMs()
			}
		}
	}
	t.Fatalf("no %s for pod %s", name, pod)
	return 0, 0
}

func summaryPod(t *testing.T, s statsapi.Summary, uid string) statsapi.PodStats {
	t.Helper()
	for _, p := range s.Pods {
		if p.PodRef.UID == uid {
			return p
		}
	}
	t.Fatalf("pod %s not in the summary", uid)
	return statsapi.PodStats{}
}

func within(got, want, frac float64) bool { return math.Abs(got-want) <= frac*want }

// Seed 003 on the live kernel: an empty pod cgroup and the container's
// processes in a literal "<slice>:cri-containerd:<id>" cgroup outside it.
// Holds on v1 and v2 alike: the kernel accounts each cgroup's processes to
// it and its ancestors only, so the pod cgroup stays at ~0 on both.
func TestLiveMisplacedContainerCountsForItsPod(t *testing.T) {
	s := realtest.NewScratch(t)
	s.Mkdir("kubepods.slice")
	s.Mkdir("kubepods.slice/" + liveSlice)
	misplaced := liveSlice + ":cri-containerd:" + liveCtr
	s.Mkdir(misplaced)
	r := runLive(t, s, misplaced)

	p := r.second.Pod(liveUID)
	if p == nil || p.Cgroup == nil || len(p.Containers) != 1 || !p.Containers[0].Misplaced {
		t.Fatalf("scan did not find the pod with its misplaced container: %+v", p)
	}
	if raw := p.Cgroup.UsageCores; raw == nil || *raw > 0.01 {
		t.Errorf("raw pod cgroup uses %v cores, want ~0 (the kubelet's view)", raw)
	}
	if ws := p.Cgroup.Stats.Memory.WorkingSetBytes; ws == nil || *ws > 1<<20 {
		t.Errorf("raw pod cgroup working set %v, want ~0", ws)
	}

	name := "pod" + liveUID
	v1, ts1 := sample(t, r.res1, "pod_cpu_usage_seconds_total", name)
	v2, ts2 := sample(t, r.res2, "pod_cpu_usage_seconds_total", name)
	rate := (v2 - v1) / (float64(ts2-ts1) / 1000)
	t.Logf("processes %.3f cores (/proc); served pod rate %.3f; raw pod cgroup %.4f", r.procCores, rate, *p.Cgroup.UsageCores)
	if !within(rate, r.procCores, 0.10) {
		t.Errorf("served pod_cpu_usage_seconds_total rate %.3f cores, processes used %.3f (per /proc)", rate, r.procCores)
	}
	sp := summaryPod(t, r.summary, liveUID)
	if sp.CPU == nil || sp.CPU.UsageNanoCores == nil || !within(float64(*sp.CPU.UsageNanoCores)/1e9, r.procCores, 0.10) {
		t.Errorf("summary pod usageNanoCores %v, processes used %.3f cores", sp.CPU, r.procCores)
	}
	ws, _ := sample(t, r.res2, "pod_memory_working_set_bytes", name)
	if ws < memMiB<<20 {
		t.Errorf("served pod working set %.0f bytes, below the memory user's %d MiB", ws, memMiB)
	}
	if sp.Memory == nil || sp.Memory.WorkingSetBytes == nil || *sp.Memory.WorkingSetBytes < memMiB<<20 {
		t.Errorf("summary pod memory %+v", sp.Memory)
	}
	if _, ok := r.res2["container_cpu_usage_seconds_total"]; !ok {
		t.Error("no container series")
	}
	// The scan's root is the scratch cgroup, which holds both processes:
	// the node series must show them too.
	n1, nts1 := nodeSample(t, r.res1, "node_cpu_usage_seconds_total")
	n2, nts2 := nodeSample(t, r.res2, "node_cpu_usage_seconds_total")
	if nrate := (n2 - n1) / (float64(nts2-nts1) / 1000); !within(nrate, r.procCores, 0.10) {
		t.Errorf("node CPU rate %.3f, processes used %.3f", nrate, r.procCores)
	}
	if nws, _ := nodeSample(t, r.res2, "node_memory_working_set_bytes"); nws < memMiB<<20 {
		t.Errorf("node working set %.0f below the memory user's %d MiB", nws, memMiB)
	}
}

func nodeSample(t *testing.T, mfs map[string]*dto.MetricFamily, name string) (float64, int64) {
	t.Helper()
	mf, ok := mfs[name]
	if !ok || len(mf.Metric) != 1 {
		t.Fatalf("no single %s", name)
	}
	m := mf.Metric[0]
	if m.Gauge != nil {
		return m.GetGauge().GetValue(), m.GetTimestampMs()
	}
	return m.GetCounter().GetValue(), m.GetTimestampMs()
}

// The same with the container properly nested: the pod's figures are the
// pod cgroup's own, not pod + container.
func TestLiveNestedContainerIsNotCountedTwice(t *testing.T) {
	s := realtest.NewScratch(t)
	s.Mkdir("kubepods.slice")
	s.Mkdir("kubepods.slice/" + liveSlice)
	ctr := "kubepods.slice/" + liveSlice + "/cri-containerd-" + liveCtr + ".scope"
	s.Mkdir(ctr)
	r := runLive(t, s, ctr)

	p := r.second.Pod(liveUID)
	if p == nil || p.Cgroup == nil || len(p.Containers) != 1 || p.Containers[0].Misplaced {
		t.Fatalf("scan did not find the pod with its nested container: %+v", p)
	}
	name := "pod" + liveUID
	v2, _ := sample(t, r.res2, "pod_cpu_usage_seconds_total", name)
	if raw := float64(*p.Cgroup.Stats.CPU.UsageNs) / 1e9; v2 != raw {
		t.Errorf("served pod CPU %.9f s, pod cgroup's own %.9f s", v2, raw)
	}
	ws, _ := sample(t, r.res2, "pod_memory_working_set_bytes", name)
	if raw := float64(*p.Cgroup.Stats.Memory.WorkingSetBytes); ws != raw {
		t.Errorf("served pod working set %.0f, pod cgroup's own %.0f", ws, raw)
	}
	v1, _ := sample(t, r.res1, "pod_cpu_usage_seconds_total", name)
	rate := (v2 - v1) / r.second.Time.Sub(r.first.Time).Seconds()
	t.Logf("processes %.3f cores (/proc); served pod rate %.3f", r.procCores, rate)
	if !within(rate, r.procCores, 0.10) {
		t.Errorf("served pod CPU rate %.3f cores, processes used %.3f (double counting would give ~%.1f)", rate, r.procCores, 2*r.procCores)
	}
	sp := summaryPod(t, r.summary, liveUID)
	if sp.CPU == nil || sp.CPU.UsageNanoCores == nil || !within(float64(*sp.CPU.UsageNanoCores)/1e9, r.procCores, 0.10) {
		t.Errorf("summary pod usageNanoCores %v, processes used %.3f cores", sp.CPU, r.procCores)
	}
}
