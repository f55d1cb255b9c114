package serve_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// The node guest's tests (scripts/vmtest --node): a real kubelet v1.37.2
// with the systemd cgroup driver and containerd 2.4.2 with SystemdCgroup
// run the static pods of scripts/vmtest.d/systemd/node (one per QoS
// class; every container fills a file in /dev/shm, burns CPU for a few
// seconds, says "burnt" and sleeps). cgwarden reads the kubelet's own
// systemd tree; what it says is checked against the tree and the
// kubelet. Elsewhere they skip (realtest.RequireSystemdKubelet).

// agreeWithin is how far cgwarden's figures may be from the kubelet's.
const agreeWithin = 0.05

// nodeGuest waits for the node guest's kubelet and its static pods.
func nodeGuest(t *testing.T) (*realtest.Kubelet, []realtest.KubeletPod) {
	t.Helper()
	k := realtest.RequireSystemdKubelet(t)
	want, err := k.StaticPodNames()
	if err != nil {
		t.Fatal(err)
	}
	return k, k.WaitRunning(t, want, realtest.KubeletWait)
}

// systemdPod is a pod slice of the kubelet's tree and the container
// scopes in it, as the test finds them on the cgroup filesystem itself.
type systemdPod struct {
	cgroup string
	scopes map[string]string // container ID → scope cgroup
}

var (
	// A pod's UID is a UUID (dashes as underscores in a unit's name), or
	// for a static pod the hash of its manifest: 32 hex digits.
	podSliceRe = regexp.MustCompile(`^kubepods(?:-(?:besteffort|burstable))?-pod([0-9a-f_]{36}|[0-9a-f]{32})\.slice$`)
	scopeRe    = regexp.MustCompile(`^cri-containerd-([0-9a-f]{64})\.scope$`)
)

// kubeletTree walks /sys/fs/cgroup/kubepods.slice (reads only: the tree
// is the kubelet's) and returns its pod slices by UID.
func kubeletTree(t *testing.T) map[string]*systemdPod {
	t.Helper()
	const root = "/sys/fs/cgroup"
	pods := map[string]*systemdPod{}
	err := filepath.WalkDir(filepath.Join(root, "kubepods.slice"), func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			// A pod slice the kubelet removed while we walked (a test's
			// pods going away): it is gone, not an error.
			return nil
		}
		if err != nil || !d.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(p, root)
		if m := podSliceRe.FindStringSubmatch(d.Name()); m != nil {
			uid := strings.ReplaceAll(m[1], "_", "-")
			pods[uid] = &systemdPod{cgroup: rel, scopes: map[string]string{}}
			return nil
		}
		if m := scopeRe.FindStringSubmatch(d.Name()); m != nil {
			pm := podSliceRe.FindStringSubmatch(filepath.Base(filepath.Dir(p)))
			if pm == nil {
				t.Errorf("container scope %s is not in a pod slice", rel)
				return fs.SkipDir
			}
			pods[strings.ReplaceAll(pm[1], "_", "-")].scopes[m[1]] = rel
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking the kubelet's tree: %v", err)
	}
	return pods
}

// inspectJSON is what the test reads of `cgwarden inspect -o json`
// (docs/schemas/inspect.schema.json).
type inspectJSON struct {
	Node struct {
		CgroupVersion string  `json:"cgroupVersion"`
		Driver        *string `json:"driver"`
		KubeRoot      *string `json:"kubeRoot"`
	} `json:"node"`
	Pods []struct {
		UID        string               `json:"uid"`
		QoS        string               `json:"qos"`
		Name       *string              `json:"name"`
		Namespace  *string              `json:"namespace"`
		Cgroup     *string              `json:"cgroup"`
		CPU        *inspectCPU          `json:"cpu"`
		Containers []inspectedContainer `json:"containers"`
	} `json:"pods"`
	Unattached []struct {
		Cgroup string `json:"cgroup"`
	} `json:"unattached"`
	Foreign []struct {
		Cgroup string `json:"cgroup"`
	} `json:"foreign"`
}

type inspectedContainer struct {
	ID        string     `json:"id"`
	Name      *string    `json:"name"`
	Runtime   *string    `json:"runtime"`
	Cgroup    string     `json:"cgroup"`
	Misplaced bool       `json:"misplaced"`
	Sandbox   bool       `json:"sandbox"`
	CPU       inspectCPU `json:"cpu"`
}

// inspectCPU is a cgroup's weight and quota as inspect reads them (null:
// unknown; quota -1: none).
type inspectCPU struct {
	Weight     *uint64  `json:"weight"`
	QuotaCores *float64 `json:"quotaCores"`
}

func (c inspectCPU) String() string {
	w, q := "?", "?"
	if c.Weight != nil {
		w = fmt.Sprint(*c.Weight)
	}
	if c.QuotaCores != nil {
		q = fmt.Sprint(*c.QuotaCores)
	}
	return "weight " + w + " quota " + q
}

func str(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

// cgwarden inspect, with names from containerd's CRI socket, on the
// kubelet's real systemd tree: every pod slice is a pod with the kubelet's
// name, namespace and QoS class, every container scope a container with
// the kubelet's name for it, or its pod's sandbox; nothing of the tree is
// left unattached.
func TestSystemdKubeletInspectNamesItsTree(t *testing.T) {
	_, pods := nodeGuest(t)
	tree := kubeletTree(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "inspect", "-o", "json", "--interval", "0", "--metadata", "cri", "--cri-socket", realtest.ContainerdSocket)
	cmd.Env = append(os.Environ(), "CGWARDEN_RUN_CLI=1", "CGWARDEN_MEMORY_USER=")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cgwarden inspect: %v", err)
	}
	var got inspectJSON
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("cgwarden inspect -o json: %v\n%s", err, out)
	}
	if got.Node.CgroupVersion != "v2" || str(got.Node.Driver) != "systemd" || str(got.Node.KubeRoot) != "/kubepods.slice" {
		t.Errorf("node: cgroup %s, driver %s, kube root %s; want v2, systemd, /kubepods.slice", got.Node.CgroupVersion, str(got.Node.Driver), str(got.Node.KubeRoot))
	}
	byUID := map[string]int{}
	for i, p := range got.Pods {
		byUID[p.UID] = i
	}
	nContainers, nSandboxes := 0, 0
	for _, kp := range pods {
		uid := kp.Metadata.UID
		sp, ok := tree[uid]
		if !ok {
			t.Errorf("the kubelet's pod %s (uid %s) has no pod slice in kubepods.slice", kp.Key(), uid)
			continue
		}
		i, ok := byUID[uid]
		if !ok {
			t.Errorf("pod %s (%s) is not in cgwarden inspect", kp.Key(), sp.cgroup)
			continue
		}
		ip := got.Pods[i]
		if str(ip.Namespace)+"/"+str(ip.Name) != kp.Key() || !strings.EqualFold(ip.QoS, kp.Status.QOSClass) || str(ip.Cgroup) != sp.cgroup {
			t.Errorf("pod %s: inspect says %s/%s, QoS %s, cgroup %s; the kubelet %s, %s, and its slice is %s",
				uid, str(ip.Namespace), str(ip.Name), ip.QoS, str(ip.Cgroup), kp.Key(), kp.Status.QOSClass, sp.cgroup)
		}
		names := kp.Containers()
		sandboxes := 0
		for id, cg := range sp.scopes {
			j := slices.IndexFunc(ip.Containers, func(c inspectedContainer) bool { return c.ID == id })
			if j < 0 {
				t.Errorf("pod %s: container scope %s is not among inspect's containers", kp.Key(), cg)
				continue
			}
			ic := ip.Containers[j]
			if ic.Cgroup != cg || ic.Misplaced || str(ic.Runtime) != "containerd" {
				t.Errorf("pod %s container %s: cgroup %s misplaced %v runtime %s; want %s, false, containerd", kp.Key(), id[:12], ic.Cgroup, ic.Misplaced, str(ic.Runtime), cg)
			}
			if name, ok := names[id]; ok {
				nContainers++
				if str(ic.Name) != name || ic.Sandbox {
					t.Errorf("pod %s container %s: inspect names it %s (sandbox %v), the kubelet %s", kp.Key(), id[:12], str(ic.Name), ic.Sandbox, name)
				}
				continue
			}
			// The one scope of a pod that is none of its containers is
			// its sandbox (the pause container).
			sandboxes++
			nSandboxes++
			if !ic.Sandbox || ic.Name != nil {
				t.Errorf("pod %s: scope %s, which holds none of the kubelet's containers, is in inspect as %s (sandbox %v); want its sandbox", kp.Key(), cg, str(ic.Name), ic.Sandbox)
			}
		}
		if sandboxes != 1 {
			t.Errorf("pod %s: %d scopes besides its containers' (want its one sandbox): %v", kp.Key(), sandboxes, sp.scopes)
		}
		for id, name := range names {
			if _, ok := sp.scopes[id]; !ok {
				t.Errorf("pod %s: the kubelet's container %s (%s) has no scope in %s", kp.Key(), name, id[:12], sp.cgroup)
			}
		}
	}
	if len(tree) != len(pods) {
		t.Errorf("kubepods.slice holds %d pod slices, the kubelet lists %d pods", len(tree), len(pods))
	}
	if len(got.Pods) != len(tree) {
		t.Errorf("inspect lists %d pods, kubepods.slice holds %d", len(got.Pods), len(tree))
	}
	for _, u := range append(got.Unattached, got.Foreign...) {
		if strings.HasPrefix(u.Cgroup, "/kubepods.slice/") {
			t.Errorf("inspect leaves %s of the kubelet's tree attached to no pod", u.Cgroup)
		}
	}
	t.Logf("TREE: kubepods.slice holds %d pod slices, %d container scopes and %d sandbox scopes; inspect names %d pods", len(tree), nContainers, nSandboxes, len(got.Pods))
	// What the kubelet set, for the record (docs/systemd.md).
	for _, p := range got.Pods {
		if p.CPU != nil {
			t.Logf("TREE: %s pod %s/%s: %s, %s", p.QoS, str(p.Namespace), str(p.Name), str(p.Cgroup), p.CPU)
		}
		for _, c := range p.Containers {
			t.Logf("TREE: %s %s/%s %s: %s %s, %s", p.QoS, str(p.Namespace), str(p.Name), map[bool]string{true: "sandbox", false: "container " + str(c.Name)}[c.Sandbox], c.ID[:12], c.Cgroup, c.CPU)
		}
	}
}

// burntAt waits until every container of pods has written "burnt" to its
// log (the kubelet's, /var/log/pods) and returns the latest time it did:
// from then on no container burns CPU or grows its memory.
func burntAt(t *testing.T, pods []realtest.KubeletPod, timeout time.Duration) time.Time {
	t.Helper()
	var last time.Time
	poll.Every(2*time.Second).Until(t, timeout, "every container saying burnt", func() (bool, string, error) {
		last = time.Time{}
		var missing []string
		for _, p := range pods {
			for _, c := range p.Spec.Containers {
				at, ok := logLine(p, c.Name, "burnt")
				if !ok {
					missing = append(missing, p.Key()+"/"+c.Name)
				}
				if at.After(last) {
					last = at
				}
			}
		}
		return len(missing) == 0, fmt.Sprintf("not yet: %v", missing), nil
	})
	return last
}

// logLine finds text in a container's log files (CRI format: time,
// stream, tag, text) and returns the time it was written.
func logLine(p realtest.KubeletPod, container, text string) (time.Time, bool) {
	dir := filepath.Join(realtest.PodLogDir, p.Metadata.Namespace+"_"+p.Metadata.Name+"_"+p.Metadata.UID, container)
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.SplitN(sc.Text(), " ", 4)
			if len(fields) == 4 && fields[3] == text {
				at, err := time.Parse(time.RFC3339Nano, fields[0])
				if err == nil {
					fh.Close()
					return at, true
				}
			}
		}
		fh.Close()
	}
	return time.Time{}, false
}

// figures are one pod's or container's CPU (seconds) and working set
// (bytes) in a summary, and when they were read.
type figures struct {
	cpu, ws  float64
	at       time.Time
	missing  []string
	children map[string]figures
}

func figuresOf(s statsapi.Summary) map[string]figures {
	one := func(what string, c *statsapi.CPUStats, m *statsapi.MemoryStats) figures {
		f := figures{}
		if c == nil || c.UsageCoreNanoSeconds == nil {
			f.missing = append(f.missing, what+" CPU")
		} else {
			f.cpu, f.at = float64(*c.UsageCoreNanoSeconds)/1e9, c.Time.Time
		}
		if m == nil || m.WorkingSetBytes == nil {
			f.missing = append(f.missing, what+" working set")
		} else {
			f.ws = float64(*m.WorkingSetBytes)
			if m.Time.Time.Before(f.at) || f.at.IsZero() {
				f.at = m.Time.Time
			}
		}
		return f
	}
	out := map[string]figures{}
	for _, p := range s.Pods {
		key := p.PodRef.Namespace + "/" + p.PodRef.Name
		f := one(key, p.CPU, p.Memory)
		f.children = map[string]figures{}
		for _, c := range p.Containers {
			cf := one(key+"/"+c.Name, c.CPU, c.Memory)
			f.children[c.Name] = cf
			f.missing = append(f.missing, cf.missing...)
			if cf.at.Before(f.at) {
				f.at = cf.at
			}
		}
		out[key] = f
	}
	return out
}

func getSummary(t *testing.T, get func(string) ([]byte, error)) map[string]figures {
	t.Helper()
	b, err := get("/stats/summary?only_cpu_and_memory=true")
	if err != nil {
		t.Fatal(err)
	}
	var s statsapi.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("/stats/summary: %v: %.300s", err, b)
	}
	return figuresOf(s)
}

// fresh says why a summary's figures may predate t0, or "".
func fresh(f map[string]figures, keys []string, t0 time.Time) string {
	for _, k := range keys {
		p, ok := f[k]
		if !ok {
			return k + " not listed"
		}
		if !p.at.After(t0) {
			return fmt.Sprintf("%s read at %s, before %s", k, p.at.Format(time.RFC3339), t0.Format(time.RFC3339))
		}
	}
	return ""
}

func off(got, want float64) float64 {
	if want == 0 {
		return math.Inf(1)
	}
	return (got - want) / want
}

// cgwarden serve's /stats/summary and /metrics/resource, with names from
// containerd's CRI socket, agree with the kubelet's own for the same pods
// on the kubelet's systemd tree: the same pods, the same containers (no
// sandbox among them), and each pod's and container's CPU time and
// working set within 5%. The figures are read once every container has
// finished its burn and the kubelet's and cgwarden's readings are both
// newer than that, so they stand still and must agree; cgwarden reading
// another cgroup (the sandbox's, the pod's for a container) would not.
func TestSystemdKubeletServeAgreesWithKubelet(t *testing.T) {
	k, pods := nodeGuest(t)
	ctx := t.Context()
	done := burntAt(t, pods, 3*time.Minute)
	t.Logf("every container burnt by %s", done.Format(time.RFC3339Nano))
	url, _ := startServe(t, "--metadata", "cri", "--cri-socket", realtest.ContainerdSocket, "--interval", "2s")
	agent := func(path string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+path, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("cgwarden %s: %d %.300s", path, resp.StatusCode, b)
		}
		return b, err
	}
	kubelet := func(path string) ([]byte, error) { return k.Get(ctx, path) }
	var keys []string
	for _, p := range pods {
		keys = append(keys, p.Key())
	}
	sort.Strings(keys)

	// Both sides' readings newer than the last burn (+1 s: the summary's
	// times are whole seconds).
	t0 := done.Add(time.Second)
	var ours, theirs map[string]figures
	start := time.Now()
	for {
		theirs, ours = getSummary(t, kubelet), getSummary(t, agent)
		why := fresh(theirs, keys, t0)
		if why == "" {
			why = fresh(ours, keys, t0)
		}
		if why == "" {
			break
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("no fresh figures after 3m: %s", why)
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("summaries fresh after %.1fs", time.Since(start).Seconds())
	compareSummaries(t, keys, ours, theirs)
	compareResourceMetrics(t, agent, kubelet, keys, done)
}

func compareSummaries(t *testing.T, keys []string, ours, theirs map[string]figures) {
	t.Helper()
	logs, problems := diffSummaries(keys, ours, theirs)
	for _, l := range logs {
		t.Log(l)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// minBurn is the least CPU time a static pod's container and pod must
// show: their burns take more, and a comparison of figures near zero
// would prove little.
const minBurn = 0.05

// diffSummaries compares cgwarden's summary figures with the kubelet's
// for the pods of keys: a COMPARE line per pod and container, and what
// disagrees (a pod or container on one side only, a figure missing, one
// more than agreeWithin off, a burn that did not happen).
func diffSummaries(keys []string, ours, theirs map[string]figures) (logs, problems []string) {
	for _, k := range slices.Sorted(maps.Keys(ours)) {
		if _, ok := theirs[k]; !ok {
			problems = append(problems, fmt.Sprintf("/stats/summary: cgwarden serves pod %s, the kubelet does not", k))
		}
	}
	check := func(what string, o, k figures) {
		if len(o.missing) > 0 || len(k.missing) > 0 {
			problems = append(problems, fmt.Sprintf("%s: figures missing: cgwarden %v, kubelet %v", what, o.missing, k.missing))
			return
		}
		dc, dw := off(o.cpu, k.cpu), off(o.ws, k.ws)
		logs = append(logs, fmt.Sprintf("COMPARE %s: CPU kubelet %.3fs cgwarden %.3fs (%+.2f%%); working set kubelet %.0f cgwarden %.0f bytes (%+.2f%%)",
			what, k.cpu, o.cpu, 100*dc, k.ws, o.ws, 100*dw))
		if math.Abs(dc) > agreeWithin || math.Abs(dw) > agreeWithin {
			problems = append(problems, fmt.Sprintf("%s: cgwarden is more than %.0f%% off the kubelet (CPU %+.2f%%, working set %+.2f%%)", what, 100*agreeWithin, 100*dc, 100*dw))
		}
		if k.cpu < minBurn {
			problems = append(problems, fmt.Sprintf("%s: the kubelet counts %.3fs of CPU, under the %.2fs its burn should take at least: the comparison would prove little", what, k.cpu, minBurn))
		}
	}
	for _, key := range keys {
		k, ok := theirs[key]
		if !ok {
			problems = append(problems, "/stats/summary: the kubelet does not serve its pod "+key)
			continue
		}
		o, ok := ours[key]
		if !ok {
			problems = append(problems, fmt.Sprintf("/stats/summary: the kubelet serves pod %s, cgwarden does not", key))
			continue
		}
		kn, on := slices.Sorted(maps.Keys(k.children)), slices.Sorted(maps.Keys(o.children))
		if !slices.Equal(kn, on) {
			problems = append(problems, fmt.Sprintf("/stats/summary pod %s: cgwarden's containers %v, the kubelet's %v", key, on, kn))
		}
		check("pod "+key, o, k)
		for _, c := range kn {
			if oc, ok := o.children[c]; ok {
				check("container "+key+"/"+c, oc, k.children[c])
			}
		}
	}
	return logs, problems
}

// compared are the /metrics/resource families whose values are compared;
// of the others only the series are.
var compared = []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "pod_cpu_usage_seconds_total", "pod_memory_working_set_bytes"}

type series struct {
	v  float64
	ts int64
}

// resourceSeries parses /metrics/resource: family → label set → sample,
// for the pods of keys (namespace/name).
func resourceSeries(body []byte, keys []string) (map[string]map[string]series, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("/metrics/resource does not parse: %w", err)
	}
	out := map[string]map[string]series{}
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "container_") && !strings.HasPrefix(name, "pod_") {
			continue
		}
		for _, m := range mf.Metric {
			ls := map[string]string{}
			var parts []string
			for _, l := range m.Label {
				ls[l.GetName()] = l.GetValue()
				parts = append(parts, l.GetName()+"="+l.GetValue())
			}
			if !slices.Contains(keys, ls["namespace"]+"/"+ls["pod"]) {
				continue
			}
			sort.Strings(parts)
			if out[name] == nil {
				out[name] = map[string]series{}
			}
			out[name][strings.Join(parts, ",")] = series{v: value(m), ts: m.GetTimestampMs()}
		}
	}
	return out, nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	return math.NaN()
}

// compareResourceMetrics: the same series of the compared families (names
// and label sets: no sandbox container), their values within 5%, read
// after every burn ended. Families the kubelet serves and cgwarden does
// not (swap, pressure) are logged.
func compareResourceMetrics(t *testing.T, agent, kubelet func(string) ([]byte, error), keys []string, done time.Time) {
	t.Helper()
	var ours, theirs map[string]map[string]series
	start := time.Now()
	for {
		kb, err := kubelet("/metrics/resource")
		if err != nil {
			t.Fatal(err)
		}
		ab, err := agent("/metrics/resource")
		if err != nil {
			t.Fatal(err)
		}
		if theirs, err = resourceSeries(kb, keys); err != nil {
			t.Fatalf("the kubelet's %v", err)
		}
		if ours, err = resourceSeries(ab, keys); err != nil {
			t.Fatalf("cgwarden's %v", err)
		}
		stale := ""
		for _, fam := range compared {
			for ls, s := range theirs[fam] {
				if s.ts <= done.UnixMilli() {
					stale = fam + "{" + ls + "} read before the last burn ended"
				}
			}
		}
		if stale == "" {
			break
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("/metrics/resource: no fresh kubelet figures after 2m: %s", stale)
		}
		time.Sleep(2 * time.Second)
	}
	logs, problems := diffSeries(ours, theirs)
	for _, l := range logs {
		t.Log(l)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// diffSeries compares cgwarden's /metrics/resource series with the
// kubelet's: the compared families' label sets alike on both sides (no
// sandbox container, none left out) and their values within agreeWithin.
// Families only the kubelet serves (swap, pressure) are logged.
func diffSeries(ours, theirs map[string]map[string]series) (logs, problems []string) {
	var only []string
	for fam := range theirs {
		if _, ok := ours[fam]; !ok {
			only = append(only, fam)
		}
	}
	sort.Strings(only)
	if len(only) > 0 {
		logs = append(logs, fmt.Sprintf("/metrics/resource: families the kubelet serves for these pods and cgwarden does not (not compared): %v", only))
	}
	n := 0
	for _, fam := range compared {
		k, o := theirs[fam], ours[fam]
		if len(k) == 0 {
			problems = append(problems, fmt.Sprintf("/metrics/resource: the kubelet serves no %s for the static pods", fam))
		}
		for _, ls := range slices.Sorted(maps.Keys(k)) {
			ks := k[ls]
			got, ok := o[ls]
			if !ok {
				problems = append(problems, fmt.Sprintf("/metrics/resource: the kubelet serves %s{%s}, cgwarden does not", fam, ls))
				continue
			}
			n++
			if d := off(got.v, ks.v); math.Abs(d) > agreeWithin {
				problems = append(problems, fmt.Sprintf("/metrics/resource %s{%s}: cgwarden %g, the kubelet %g (%+.2f%%)", fam, ls, got.v, ks.v, 100*d))
			}
		}
		for _, ls := range slices.Sorted(maps.Keys(o)) {
			if _, ok := k[ls]; !ok {
				problems = append(problems, fmt.Sprintf("/metrics/resource: cgwarden serves %s{%s}, the kubelet does not", fam, ls))
			}
		}
	}
	logs = append(logs, fmt.Sprintf("/metrics/resource: %d series of %v compared", n, compared))
	return logs, problems
}
