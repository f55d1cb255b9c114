package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// nriAnnotation is what `cgwarden nri` puts on a container whose
// cgroupsPath it set (internal/nriplugin.Annotation).
const nriAnnotation = "cgwarden.io/nri-cgroups-path"

// memMiB is what each test container writes to its memory-backed volume
// at start: tmpfs pages are charged to the writer's memory cgroup and stay
// charged while the file exists.
const memMiB = 64

// nriPod is a BestEffort busybox pod on the host network under
// runtimeClass ("" for runc) that writes memMiB MiB to a memory-backed
// emptyDir, then burns some CPU.
func nriPod(ns, name, runtimeClass string) *corev1.Pod {
	one := int64(1)
	script := fmt.Sprintf("dd if=/dev/zero of=/fill/x bs=1M count=%d 2>/dev/null; "+
		"while :; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 0.2; done", memMiB)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: &one,
			Containers: []corev1.Container{{
				Name: "main", Image: busybox, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", script},
				VolumeMounts: []corev1.VolumeMount{{Name: "fill", MountPath: "/fill"}},
			}},
			Volumes: []corev1.Volume{{Name: "fill", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
				Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(128<<20, resource.BinarySI)}}}},
		},
	}
	if runtimeClass != "" {
		p.Spec.RuntimeClassName = &runtimeClass
	}
	return p
}

// created is a pod the test made, as the node runs it.
type created struct {
	pod *corev1.Pod
	id  string // the container's containerd ID
}

func (e *env) startNRIPod(t *testing.T, ns, name, runtimeClass string) created {
	t.Helper()
	if _, err := e.cs.CoreV1().Pods(ns).Create(context.Background(), nriPod(ns, name, runtimeClass), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitRunning(t, e, ns, name)
	return created{pod: p, id: strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")}
}

// kubeletPath is the container's cgroup in the kubelet's cgroupfs layout.
func (c created) kubeletPath() string {
	return "/kubepods/besteffort/pod" + string(c.pod.UID) + "/" + c.id
}

// literalPath is where the misplace runtime puts it without the plugin.
func (c created) literalPath() string {
	return "/kubepods-besteffort-pod" + strings.ReplaceAll(string(c.pod.UID), "-", "_") + ".slice:cri-containerd:" + c.id
}

// procsIn counts the processes in a cgroup of the cpu hierarchy (-1: no
// such cgroup).
func procsIn(path string) int {
	root, _ := cgroupRoot()
	b, err := os.ReadFile(filepath.Join(root, path, "cgroup.procs"))
	if err != nil {
		return -1
	}
	return len(strings.Fields(string(b)))
}

// podStats is a pod of the kubelet's own Summary API.
type podStats struct {
	PodRef struct{ Name, Namespace, UID string } `json:"podRef"`
	CPU    *struct {
		UsageNanoCores *uint64 `json:"usageNanoCores"`
	} `json:"cpu"`
	Memory *struct {
		WorkingSetBytes *uint64 `json:"workingSetBytes"`
	} `json:"memory"`
}

// kubeletPodStats reads the kubelet's own /stats/summary and returns the
// pod's entry (nil if absent). The kubelet is asked directly, with the
// admin's client certificate: the API server refuses to proxy to a node
// whose address is loopback.
func (e *env) kubeletPodStats(t *testing.T, uid string) *podStats {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host = "https://127.0.0.1:10250"
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(cfg.Host + "/stats/summary")
	if err != nil {
		t.Fatalf("kubelet /stats/summary: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("kubelet /stats/summary: %d %v: %.200s", resp.StatusCode, err, raw)
	}
	var s struct{ Pods []podStats }
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("kubelet /stats/summary: %v", err)
	}
	for i := range s.Pods {
		if s.Pods[i].PodRef.UID == uid {
			return &s.Pods[i]
		}
	}
	return nil
}

// firstSample polls the Summary API for up to window and returns the
// pod's first sample with CPU usage above 0 (the kubelet's very first
// samples of a new pod are zeros while it has one reading only), or, when
// none comes, the last one seen (then ok is false).
func (e *env) firstSample(t *testing.T, c created, window time.Duration) (f figures, ok bool) {
	t.Helper()
	deadline := time.Now().Add(window)
	for time.Now().Before(deadline) {
		s := e.kubeletPodStats(t, string(c.pod.UID))
		if s != nil && s.CPU != nil && s.CPU.UsageNanoCores != nil && s.Memory != nil && s.Memory.WorkingSetBytes != nil {
			f = figures{float64(*s.CPU.UsageNanoCores) / 1e9, float64(*s.Memory.WorkingSetBytes) / (1 << 20)}
			if f.cores > 0 {
				return f, true
			}
		}
		time.Sleep(time.Second)
	}
	return f, false
}

// containerSpec is the OCI spec containerd made for a container (ctr
// containers info), the one the runtime received after NRI.
func containerSpec(t *testing.T, id string) map[string]any {
	t.Helper()
	out, err := exec.Command(os.Getenv("CGWARDEN_CLUSTER_CTR"), "--address", os.Getenv("CGWARDEN_CLUSTER_CONTAINERD"),
		"-n", "k8s.io", "containers", "info", id).Output()
	if err != nil {
		t.Fatalf("ctr containers info %s: %v", id, err)
	}
	var info struct{ Spec map[string]any }
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("ctr containers info %s: %v", id, err)
	}
	return info.Spec
}

func specPath(spec map[string]any) string {
	l, _ := spec["linux"].(map[string]any)
	p, _ := l["cgroupsPath"].(string)
	return p
}

func specAnnotation(spec map[string]any, k string) (string, bool) {
	a, _ := spec["annotations"].(map[string]any)
	v, ok := a[k].(string)
	return v, ok
}

// plugin is `cgwarden nri` running on the host against the lane's
// containerd.
type plugin struct {
	cmd     *exec.Cmd
	metrics string
}

func startPlugin(t *testing.T, bin string) *plugin {
	t.Helper()
	sock := os.Getenv("CGWARDEN_CLUSTER_NRI")
	if sock == "" {
		t.Fatal("CGWARDEN_CLUSTER_NRI is not set (eval \"$(scripts/cluster env)\")")
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "nri", "--socket", sock, "--runtime-handlers", "misplace", "--learned-file", "",
		"--listen", addr, "--retry", "500ms", "--log-level", "debug")
	logf, err := os.Create(filepath.Join(t.TempDir(), "nri.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &plugin{cmd: cmd, metrics: "http://" + addr + "/metrics"}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("cgwarden nri log:\n%s", tail(string(b), 4000))
		}
	})
	poll.Until(t, 30*time.Second, "cgwarden nri registered", func() (bool, string, error) {
		v, err := p.series(`cgwarden_nri_connected`)
		return err == nil && v == 1, fmt.Sprint(v, err), nil
	})
	return p
}

func (p *plugin) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
	}
}

// series reads one sample of the plugin's /metrics by its full name with
// labels as exposed.
func (p *plugin) series(name string) (float64, error) {
	resp, err := http.Get(p.metrics)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 1<<20))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no %s on %s", name, p.metrics)
}

var hex64 = regexp.MustCompile(`[0-9a-f]{64}`)

// The misplace runtime (runc behind test/cluster/misplace, which plays a
// runtime on a systemd node that takes slice:prefix:id literally):
// without the plugin its container lands at the root and the kubelet's
// own pod figures miss it; with `cgwarden nri` it is created under its pod
// from the start — the kubelet's first full sample has the pod's CPU and
// its 64 MiB, and no literal directory is left — while a runc pod's spec
// is what it is without the plugin; with the plugin killed, containers are
// still created (misplaced).
func TestNRIPluginPlacesMisplacingRuntime(t *testing.T) {
	e := cluster(t)
	bin := buildCgwarden(t)
	ns := e.namespace(t)

	// 1. Without the plugin.
	before := e.startNRIPod(t, ns, "misplaced", "misplace")
	runcBefore := e.startNRIPod(t, ns, "runc-before", "")
	if n := procsIn(before.literalPath()); n < 1 {
		t.Fatalf("without the plugin: %s holds %d processes; the misplace runtime did not misplace (the test could not tell a placement)", before.literalPath(), n)
	}
	if n := procsIn(before.kubeletPath()); n > 0 {
		t.Errorf("without the plugin: the kubelet's %s holds %d processes", before.kubeletPath(), n)
	}
	f, got := e.firstSample(t, before, 45*time.Second)
	t.Logf("without the plugin, the kubelet's pod over 45 s: CPU above 0 seen %v; last sample %.3f cores, %.1f MiB", got, f.cores, f.mem)
	if f.mem >= memMiB {
		t.Errorf("without the plugin the kubelet's pod memory is %.1f MiB: the %d MiB outside the pod should be missing", f.mem, memMiB)
	}

	// Repair (cgwarden fix, the adopt step) moves the processes into the
	// pod: the kubelet's pod CPU follows, the memory charged before the
	// move does not on kernels ≥ 6.13 (and never on v2).
	repaired := e.repair(t, bin, before)
	t.Logf("without the plugin, after repair, the kubelet's pod: %.3f cores, %.1f MiB (kernel %s)", repaired.cores, repaired.mem, kernel(t))
	if repaired.mem >= memMiB {
		t.Logf("this kernel moved the memory charges with the processes (memory.move_charge_at_immigrate): repair alone restores the pod's memory here")
	}

	// 2. With the plugin.
	p := startPlugin(t, bin)
	placed := e.startNRIPod(t, ns, "placed", "misplace")
	runcWith := e.startNRIPod(t, ns, "runc-with", "")
	spec := containerSpec(t, placed.id)
	if got := specPath(spec); got != placed.kubeletPath() {
		t.Errorf("the placed container's spec cgroupsPath %q, want %q", got, placed.kubeletPath())
	}
	if v, _ := specAnnotation(spec, nriAnnotation); v != placed.kubeletPath() {
		t.Errorf("the placed container's %s = %q, want %q", nriAnnotation, v, placed.kubeletPath())
	}
	if n := procsIn(placed.kubeletPath()); n < 1 {
		t.Errorf("with the plugin: %s holds %d processes, want the container's", placed.kubeletPath(), n)
	}
	if n := procsIn(placed.literalPath()); n != -1 {
		t.Errorf("with the plugin: the literal cgroup %s exists (%d processes)", placed.literalPath(), n)
	}
	f, got = e.firstSample(t, placed, 90*time.Second)
	t.Logf("with the plugin, the kubelet's first pod sample with CPU: %.3f cores, %.1f MiB", f.cores, f.mem)
	if !got || f.mem < memMiB {
		t.Errorf("with the plugin the kubelet's first pod sample with CPU is %.3f cores, %.1f MiB (CPU seen: %v); want at least %d MiB with it", f.cores, f.mem, got, memMiB)
	}
	if v, err := p.series(`cgwarden_nri_containers_total{handler="misplace",result="already_right"}`); err != nil || v < 1 {
		t.Errorf("plugin's count of misplace containers set: %v, %v", v, err)
	}
	if _, err := p.series(`cgwarden_nri_containers_total{handler="",result="already_right"}`); err == nil {
		t.Error("the plugin counted a runc container")
	}

	// 3. runc pods: the same spec with and without the plugin (IDs and
	// names aside), in the kubelet's place, without the annotation.
	for _, c := range []created{runcBefore, runcWith} {
		s := containerSpec(t, c.id)
		if got := specPath(s); got != c.kubeletPath() {
			t.Errorf("runc pod %s: cgroupsPath %q, want %q", c.pod.Name, got, c.kubeletPath())
		}
		if _, ok := specAnnotation(s, nriAnnotation); ok {
			t.Errorf("runc pod %s carries %s", c.pod.Name, nriAnnotation)
		}
	}
	if a, b := normalSpec(t, runcBefore), normalSpec(t, runcWith); a != b {
		t.Errorf("a runc pod's spec differs with the plugin:\nwithout %s\n   with %s", a, b)
	}

	// 4. The plugin killed: containers are still created (misplaced).
	p.kill()
	after := e.startNRIPod(t, ns, "after-kill", "misplace")
	if n := procsIn(after.literalPath()); n < 1 {
		t.Errorf("with the plugin killed: %s holds %d processes, want the container (created, misplaced)", after.literalPath(), n)
	}
}

// normalSpec is a container's spec as JSON with what differs between two
// pods of the same shape replaced: IDs, the pod's UID, name and namespace,
// the sandbox's PID in namespace paths, the kubelet's random suffixes
// (termination log, service account volume), and the order of the service
// environment variables (the kubelet builds them from a map).
func normalSpec(t *testing.T, c created) string {
	t.Helper()
	spec := containerSpec(t, c.id)
	if proc, ok := spec["process"].(map[string]any); ok {
		if env, ok := proc["env"].([]any); ok {
			slices.SortFunc(env, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		}
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(b), string(c.pod.UID), "UID")
	s = strings.ReplaceAll(s, strings.ReplaceAll(string(c.pod.UID), "-", "_"), "UID")
	s = strings.ReplaceAll(s, c.pod.Name, "NAME")
	s = strings.ReplaceAll(s, c.pod.Namespace, "NS")
	s = hex64.ReplaceAllString(s, "ID")
	s = procPID.ReplaceAllString(s, "/proc/PID/")
	s = termLog.ReplaceAllString(s, "/containers/main/X")
	return apiAccess.ReplaceAllString(s, "kube-api-access-X")
}

var (
	procPID   = regexp.MustCompile(`/proc/[0-9]+/`)
	termLog   = regexp.MustCompile(`/containers/main/[0-9a-f]+`)
	apiAccess = regexp.MustCompile(`kube-api-access-[a-z0-9]+`)
)

type figures struct{ cores, mem float64 }

// repair runs `cgwarden fix --apply` for the pod's misplaced container and
// waits until the kubelet's pod CPU is above 0 (the processes are in the
// pod), returning that sample.
func (e *env) repair(t *testing.T, bin string, c created) figures {
	t.Helper()
	out, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "get", "pods", "-A", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl get pods: %v", err)
	}
	podsFile := filepath.Join(t.TempDir(), "pods.json")
	if err := os.WriteFile(podsFile, out, 0o644); err != nil {
		t.Fatal(err)
	}
	fix := exec.Command(bin, "fix", "--apply", "--only", "misplaced-container", "--pods", podsFile,
		"--pod", string(c.pod.UID), "--journal-dir", t.TempDir())
	if out, err := fix.CombinedOutput(); err != nil {
		t.Fatalf("cgwarden fix --apply: %v\n%s", err, out)
	}
	if n := procsIn(c.kubeletPath()); n < 1 {
		t.Fatalf("after repair %s holds %d processes", c.kubeletPath(), n)
	}
	var f figures
	poll.Until(t, 90*time.Second, "the kubelet's pod CPU after repair", func() (bool, string, error) {
		s := e.kubeletPodStats(t, string(c.pod.UID))
		if s == nil || s.CPU == nil || s.CPU.UsageNanoCores == nil || s.Memory == nil || s.Memory.WorkingSetBytes == nil {
			return false, "no full sample", nil
		}
		f = figures{float64(*s.CPU.UsageNanoCores) / 1e9, float64(*s.Memory.WorkingSetBytes) / (1 << 20)}
		// Above the pause process's own (about 0.002 cores): the burner's.
		return f.cores > 0.02, fmt.Sprintf("%.3f cores", f.cores), nil
	})
	return f
}

func kernel(t *testing.T) string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
