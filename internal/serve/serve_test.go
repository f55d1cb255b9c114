package serve

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/cgwarden/cgwarden/internal/buildinfo"
	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

const seedPod = "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c"

// feedExample feeds both samples of an embedded snapshot to a new server.
func feedExample(t *testing.T, name string, meta *metadata.Set) *Server {
	t.Helper()
	return feedExampleTo(t, Config{NodeName: "k3s-node"}, name, meta)
}

// feedExampleTo is feedExample with the server's configuration given.
func feedExampleTo(t *testing.T, cfg Config, name string, meta *metadata.Set) *Server {
	t.Helper()
	b, ok := examples.Open(name)
	if !ok {
		t.Fatalf("no example %s", name)
	}
	snap, err := snapshot.Load(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	s := New(cfg)
	if err := s.FeedSamples(snap.Samples, meta); err != nil {
		t.Fatal(err)
	}
	return s
}

func get(t *testing.T, h http.Handler, url string) (int, string, http.Header) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", url, nil))
	return rec.Code, rec.Body.String(), rec.Header()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file (go test -update to accept):\n--- got\n%s", name, got)
	}
}

// volatile are /metrics lines that depend on the test process itself.
// cgwarden_build_info's sample names the toolchain; its HELP and TYPE
// stay, and TestBuildInfoMetric checks the sample.
var volatile = regexp.MustCompile(`^((# (HELP|TYPE) )?(go_|process_|cgwarden_scan_duration_seconds)|cgwarden_build_info\{)`)

// TestGoldenSeed003 serves seed 003 the way `cgwarden serve` does by
// default (internal/cli's TestServeDefaultsMatchGolden checks that the
// command's defaults give this configuration), and with --demand.
func TestGoldenSeed003(t *testing.T) {
	goldenSeed003(t, goldenConfig(), "seed-003")
	demand := goldenConfig()
	demand.Demand = true
	goldenSeed003(t, demand, "seed-003-demand")
}

// goldenConfig is serve's configuration as the command builds it with no
// flag given, for seed 003 (its node name).
func goldenConfig() Config {
	return Config{NodeName: "k3s-node", Findings: true}
}

func goldenSeed003(t *testing.T, cfg Config, prefix string) {
	h := feedExampleTo(t, cfg, "seed-003-k3s-spin", nil).Handler()

	code, res, hdr := get(t, h, "/metrics/resource")
	if code != 200 || hdr.Get("Content-Type") != resourceContentType {
		t.Fatalf("/metrics/resource: %d %q", code, hdr.Get("Content-Type"))
	}
	golden(t, prefix+".metrics-resource.txt", res)

	code, sum, _ := get(t, h, "/stats/summary?only_cpu_and_memory=true")
	if code != 200 {
		t.Fatalf("/stats/summary: %d %s", code, sum)
	}
	golden(t, prefix+".stats-summary.json", sum)

	code, own, _ := get(t, h, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	var keep []string
	for _, l := range strings.Split(own, "\n") {
		if !volatile.MatchString(l) {
			keep = append(keep, l)
		}
	}
	golden(t, prefix+".metrics.txt", strings.Join(keep, "\n"))
}

// /metrics names the build: version, commit and Go version, value 1.
func TestBuildInfoMetric(t *testing.T) {
	h := feedExample(t, "seed-003-k3s-spin", nil).Handler()
	_, own, _ := get(t, h, "/metrics")
	in := buildinfo.Get()
	want := fmt.Sprintf("cgwarden_build_info{goversion=%q,revision=%q,version=%q} 1\n", in.GoVersion, in.Commit(), in.Version)
	if !strings.Contains(own, want) {
		t.Errorf("/metrics lacks %q", want)
	}
}

// The acceptance: the seed's pod is served with non-zero CPU on
// all three endpoints while its raw pod cgroup reads zero.
func TestSeed003PodIsNonZeroEverywhere(t *testing.T) {
	s := feedExample(t, "seed-003-k3s-spin", nil)
	h := s.Handler()
	st := s.cur.Load()
	if raw := st.node.Pod(seedPod).Cgroup.Stats.CPU.UsageNs; raw == nil || *raw != 0 {
		t.Fatalf("raw pod cgroup usage %v, want 0", raw)
	}
	_, res, _ := get(t, h, "/metrics/resource")
	want := `pod_cpu_usage_seconds_total{namespace="",pod="pod` + seedPod + `"} 26.392435 1724261313000`
	if !strings.Contains(res, want) {
		t.Errorf("/metrics/resource lacks %s:\n%s", want, res)
	}
	_, own, _ := get(t, h, "/metrics")
	if want := `cgwarden_pod_cpu_usage_cores{namespace="",pod="pod` + seedPod + `",uid="` + seedPod + `"} 0.95`; !strings.Contains(own, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	_, body, _ := get(t, h, "/stats/summary")
	var sum statsapi.Summary
	if err := json.Unmarshal([]byte(body), &sum); err != nil {
		t.Fatal(err)
	}
	for _, p := range sum.Pods {
		if p.PodRef.UID != seedPod {
			continue
		}
		if p.CPU == nil || p.CPU.UsageNanoCores == nil || *p.CPU.UsageNanoCores != 950_000_000 {
			t.Errorf("summary pod CPU = %+v, want 950000000 nanocores", p.CPU)
		}
		if p.Memory == nil || p.Memory.WorkingSetBytes == nil || *p.Memory.WorkingSetBytes != 25096192 {
			t.Errorf("summary pod memory = %+v", p.Memory)
		}
		return
	}
	t.Fatalf("pod %s not in the summary", seedPod)
}

// The Summary must decode into the kubelet's own types with nothing left
// over, as a strict client would read it.
func TestSummaryDecodesStrictly(t *testing.T) {
	_, body, _ := get(t, feedExample(t, "seed-003-k3s-spin", nil).Handler(), "/stats/summary")
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	var sum statsapi.Summary
	if err := dec.Decode(&sum); err != nil {
		t.Fatal(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("trailing data after the summary: %v", err)
	}
	if sum.Node.NodeName != "k3s-node" || sum.Node.CPU == nil || sum.Node.Memory == nil || sum.Node.Memory.WorkingSetBytes == nil {
		t.Fatalf("node = %+v", sum.Node)
	}
	if len(sum.Pods) != 2 {
		t.Fatalf("%d pods, want 2", len(sum.Pods))
	}
}

func TestNamesFromMetadata(t *testing.T) {
	start := mustTime(t, "2024-08-21T17:22:33Z")
	meta := metadata.NewSet([]metadata.Pod{{
		UID: seedPod, Name: "spin-test-66d9dd45f5-csf5j", Namespace: "default", StartTime: start,
		Containers: []metadata.Container{{Name: "spin-test", ID: "c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00", StartTime: start}},
	}})
	h := feedExample(t, "seed-003-k3s-spin", meta).Handler()
	_, res, _ := get(t, h, "/metrics/resource")
	for _, want := range []string{
		`container_cpu_usage_seconds_total{container="spin-test",namespace="default",pod="spin-test-66d9dd45f5-csf5j"} 26.392435 1724261313000`,
		`container_start_time_seconds{container="spin-test",namespace="default",pod="spin-test-66d9dd45f5-csf5j"} 1.724260953e+09`,
		`pod_memory_working_set_bytes{namespace="default",pod="spin-test-66d9dd45f5-csf5j"} 2.5096192e+07 1724261313000`,
	} {
		if !strings.Contains(res, want) {
			t.Errorf("missing %s in\n%s", want, res)
		}
	}
}

func TestReadiness(t *testing.T) {
	s := New(Config{})
	h := s.Handler()
	for _, path := range []string{"/readyz", "/metrics/resource", "/stats/summary"} {
		if code, _, _ := get(t, h, path); code != http.StatusServiceUnavailable {
			t.Errorf("%s before the first scan: %d, want 503", path, code)
		}
	}
	if code, body, _ := get(t, h, "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, _, _ := get(t, h, "/stats/summary?only_cpu_and_memory=maybe"); code != http.StatusBadRequest {
		t.Errorf("bad only_cpu_and_memory: %d, want 400", code)
	}
	h = feedExample(t, "seed-003-k3s-spin", nil).Handler()
	if code, _, _ := get(t, h, "/readyz"); code != 200 {
		t.Errorf("/readyz after a scan: %d", code)
	}
	if code, _, _ := get(t, h, "/nope"); code != http.StatusNotFound {
		t.Errorf("/nope: %d", code)
	}
}

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{"127.0.0.1:9530", false, true},
		{"[::1]:9530", false, true},
		{"localhost:9530", false, true},
		{"127.0.0.2:80", false, true},
		{":9530", false, false},
		{"0.0.0.0:9530", false, false},
		{"10.0.0.5:9530", false, false},
		{"[::]:9530", false, false},
		{":9530", true, true},
		{"10.0.0.5:9530", true, true},
		{"127.0.0.1", false, false},
		{"127.0.0.1:notaport", true, false},
	} {
		err := CheckListen(tc.addr, tc.remote)
		if (err == nil) != tc.ok {
			t.Errorf("CheckListen(%q, %v) = %v", tc.addr, tc.remote, err)
		}
	}
}

func TestAuditFindingsOnMetrics(t *testing.T) {
	s := feedExampleTo(t, Config{NodeName: "k3s-node", Findings: true}, "seed-003-k3s-spin", nil)
	_, own, _ := get(t, s.Handler(), "/metrics")
	re := regexp.MustCompile(`(?m)^cgwarden_audit_findings\{rule="misplaced-container",severity="error"\} (\d+)$`)
	m := re.FindStringSubmatch(own)
	if m == nil || m[1] == "0" {
		t.Errorf("the seed's misplaced container is not counted: %v\n%s", m, own)
	}
	if !strings.Contains(own, `cgwarden_audit_findings{rule="tier-drift",severity="info"} 0`) {
		t.Errorf("rules without findings are not listed at 0")
	}
}

func TestGzipWhenAccepted(t *testing.T) {
	h := feedExample(t, "seed-003-k3s-spin", nil).Handler()
	for _, path := range []string{"/metrics/resource", "/stats/summary"} {
		_, plain, _ := get(t, h, path)
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Accept-Encoding", "gzip, deflate")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Header().Get("Content-Encoding") != "gzip" {
			t.Fatalf("%s: not gzipped", path)
		}
		zr, err := gzip.NewReader(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(zr)
		if err != nil || string(got) != plain {
			t.Errorf("%s: gzipped body differs from the plain one (%v)", path, err)
		}
		req.Header.Set("Accept-Encoding", "gzip;q=0")
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Header().Get("Content-Encoding") != "" || rec.Body.String() != plain {
			t.Errorf("%s: gzip;q=0 still gzipped", path)
		}
	}
}

// A cgroup name that is not UTF-8 (anything can be a directory name) must
// not break the exposition.
func TestOddBytesInNamesDoNotBreakTheExposition(t *testing.T) {
	s := feedExample(t, "seed-003-k3s-spin", nil)
	st := s.cur.Load()
	for i := range st.pods {
		for j := range st.pods[i].Containers {
			st.pods[i].Containers[j].Name = "bad\xffname"
		}
	}
	st.pods[0].Containers[0].Cgroup.Path = "/odd\xfe:cri-containerd:x"
	h := s.Handler()
	for _, p := range []string{"/metrics/resource", "/metrics"} {
		code, body, _ := get(t, h, p)
		if code != 200 || !strings.Contains(body, "bad\uFFFDname") {
			t.Errorf("%s: %d\n%s", p, code, body)
		}
	}
}

// cgwarden_node_cgroup_info carries the runtime the Node reports, and
// nothing when the agent does not read its Node.
func TestNodeCgroupInfoNamesTheRuntime(t *testing.T) {
	meta := metadata.NewSet(nil)
	meta.SetNodeInfo(metadata.NodeInfo{ContainerRuntimeVersion: "containerd://2.4.2"})
	for _, c := range []struct {
		meta *metadata.Set
		want string
	}{
		{meta, `container_runtime="containerd://2.4.2"`},
		{nil, `container_runtime=""`},
	} {
		_, own, _ := get(t, feedExampleTo(t, goldenConfig(), "seed-003-k3s-spin", c.meta).Handler(), "/metrics")
		var line string
		for _, l := range strings.Split(own, "\n") {
			if strings.HasPrefix(l, "cgwarden_node_cgroup_info{") {
				line = l
			}
		}
		if !strings.Contains(line, c.want) {
			t.Errorf("cgwarden_node_cgroup_info: %q, want %s", line, c.want)
		}
	}
}
