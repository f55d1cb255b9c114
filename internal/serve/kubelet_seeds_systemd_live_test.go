package serve_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
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

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"

	"github.com/cgwarden/cgwarden/internal/realtest"
)

// Seeds 000 and 003 against the node guest's real kubelet (v1.37.2, the
// systemd cgroup driver), containerd 2.4.2 (SystemdCgroup) and systemd as
// PID 1 on pure cgroup v2 (scripts/vmtest --node). Each test adds its own
// static pods to the kubelet's manifest directory and removes them at the
// end, waiting until the kubelet has torn them down, so the node's own
// three pods are all the next test finds.

// cgroupRoot is the unified hierarchy of the guest.
const cgroupRoot = "/sys/fs/cgroup"

// seedPodYAML is a static pod of one container "burn" running script,
// in namespace default, on the host's network (the guest's only CNI
// network is a loopback one); extra is put under metadata and resources
// under the container.
func seedPodYAML(name, annotations, resources, script string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: default\n  labels: {app: cgwarden-seed}\n", name)
	if annotations != "" {
		fmt.Fprintf(&b, "  annotations: {%s}\n", annotations)
	}
	fmt.Fprintf(&b, "spec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: burn\n    image: cgwarden.local/busybox:1\n    imagePullPolicy: Never\n    command: [sh, -c, %q]\n", script)
	if resources != "" {
		fmt.Fprintf(&b, "    resources: {%s}\n", resources)
	}
	return b.String()
}

// staticPods writes manifests (pod name → YAML) into the kubelet's
// manifest directory, waits until each pod runs, and returns the
// kubelet's pods by their manifest names. At cleanup the files are removed
// and the test waits until the kubelet no longer lists the pods and their
// slices are gone.
func staticPods(t *testing.T, k *realtest.Kubelet, manifests map[string]string) map[string]realtest.KubeletPod {
	t.Helper()
	var keys, files []string
	byKey := map[string]string{}
	for name, doc := range manifests {
		file := filepath.Join(realtest.StaticPodDir, "cgwarden-test-"+name+".yaml")
		// The kubelet skips dot files: write one, then rename it in.
		tmp := filepath.Join(realtest.StaticPodDir, ".cgwarden-test-"+name)
		if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
		key := "default/" + name + "-" + k.NodeName
		keys = append(keys, key)
		files = append(files, file)
		byKey[key] = name
	}
	var uids []string
	t.Cleanup(func() {
		for _, f := range files {
			_ = os.Remove(f)
		}
		waitGone(t, k, keys, uids)
	})
	out := map[string]realtest.KubeletPod{}
	for _, p := range k.WaitRunning(t, keys, 5*time.Minute) {
		if name, ok := byKey[p.Key()]; ok {
			out[name] = p
			uids = append(uids, p.Metadata.UID)
		}
	}
	return out
}

// waitGone waits (cleanup) until the kubelet lists none of keys and no
// pod slice of uids is left.
func waitGone(t *testing.T, k *realtest.Kubelet, keys, uids []string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var left []string
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		pods, err := k.Pods(ctx)
		cancel()
		if err != nil {
			left = append(left, err.Error())
		}
		for _, p := range pods {
			if slices.Contains(keys, p.Key()) {
				left = append(left, p.Key())
			}
		}
		tree := kubeletTree(t)
		for _, u := range uids {
			if p, ok := tree[u]; ok {
				left = append(left, p.cgroup)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the test's static pods are not gone 3 min after their manifests were removed: %s\n%s", strings.Join(left, "; "), realtest.NodeJournal(40))
			return
		}
		time.Sleep(time.Second)
	}
}

// onlyContainer is the ID of p's one container.
func onlyContainer(t *testing.T, p realtest.KubeletPod) string {
	t.Helper()
	ids := p.Containers()
	if len(ids) != 1 {
		t.Fatalf("pod %s: %d containers, want 1", p.Key(), len(ids))
	}
	for id := range ids {
		return id
	}
	return ""
}

// readFile is a cgroup file's content, trimmed; "" when it cannot be read.
func readFile(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// usageUsec is cpu.stat's usage_usec of the cgroup dir (absolute).
func usageUsec(t *testing.T, dir string) float64 {
	t.Helper()
	for _, l := range strings.Split(readFile(filepath.Join(dir, "cpu.stat")), "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s/cpu.stat: %v", dir, err)
			}
			return f
		}
	}
	t.Fatalf("%s/cpu.stat: no usage_usec", dir)
	return 0
}

// procs lists the processes in dir and every cgroup beneath it.
func procs(t *testing.T, dir string) []int {
	t.Helper()
	var out []int
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		for _, f := range strings.Fields(readFile(filepath.Join(p, "cgroup.procs"))) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		return nil
	})
	return out
}

// pin binds every thread of the processes in dir to CPU cpu, so that the
// pods' burners contend for one CPU of the guest's two and their shares
// are the weights' (as seed 000's node, where the pods contend for all).
func pin(t *testing.T, dir string, cpu int) {
	t.Helper()
	var set unix.CPUSet
	set.Set(cpu)
	ps := procs(t, dir)
	if len(ps) == 0 {
		t.Fatalf("no process in %s to pin", dir)
	}
	for _, pid := range ps {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, task := range tasks {
			tid, _ := strconv.Atoi(task.Name())
			if err := unix.SchedSetaffinity(tid, &set); err != nil {
				t.Fatalf("pinning thread %d of %s: %v", tid, dir, err)
			}
		}
	}
}

// signalAll sends sig to every process in dirs (the test's own pods).
func signalAll(t *testing.T, sig unix.Signal, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		for _, pid := range procs(t, d) {
			if err := unix.Kill(pid, sig); err != nil && err != unix.ESRCH {
				t.Fatalf("signal %v to %d in %s: %v", sig, pid, d, err)
			}
		}
	}
}

// cpuSplit measures the CPU time each of dirs used over d, in cores.
func cpuSplit(t *testing.T, d time.Duration, dirs ...string) []float64 {
	t.Helper()
	before := make([]float64, len(dirs))
	for i, dir := range dirs {
		before[i] = usageUsec(t, dir)
	}
	t0 := time.Now()
	time.Sleep(d)
	secs := time.Since(t0).Seconds()
	out := make([]float64, len(dirs))
	for i, dir := range dirs {
		out[i] = (usageUsec(t, dir) - before[i]) / 1e6 / secs
	}
	return out
}

// systemdProperty is a unit's property as systemctl shows it.
func systemdProperty(t *testing.T, unit, prop string) string {
	t.Helper()
	out, err := exec.Command("systemctl", "show", "-p", prop, "--value", unit).Output()
	if err != nil {
		t.Fatalf("systemctl show -p %s %s: %v", prop, unit, err)
	}
	return strings.TrimSpace(string(out))
}

// cgwardenCLI runs this test binary as cgwarden (TestMain) and returns
// its standard output; a failure fails t with both outputs.
func cgwardenCLI(t *testing.T, args ...string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "CGWARDEN_RUN_CLI=1", "CGWARDEN_MEMORY_USER=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("cgwarden %s: %v\n%s\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// metricSum is the sum of every series of the family name on url's
// /metrics (0 when the family is not there).
func metricSum(t *testing.T, url, name string) float64 {
	t.Helper()
	v := metricSumOr(url, name)
	if v < 0 {
		t.Fatalf("%s/metrics: not readable", url)
	}
	return v
}

// offTarget watches weight files every 5 ms and records each span during
// which one held something other than its target.
type offTarget struct {
	targets map[string]string // file → target
	mu      sync.Mutex
	spans   []offSpan
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

type offSpan struct {
	file       string
	value      string
	start, end time.Time // end zero: still off
}

func watchOffTarget(targets map[string]string) *offTarget {
	w := &offTarget{targets: targets, stop: make(chan struct{}), done: make(chan struct{})}
	open := map[string]int{} // file → index of its open span
	go func() {
		defer close(w.done)
		for {
			now := time.Now()
			for f, want := range w.targets {
				got := readFile(f)
				i, isOpen := open[f]
				w.mu.Lock()
				switch {
				case got != want && !isOpen:
					open[f] = len(w.spans)
					w.spans = append(w.spans, offSpan{file: f, value: got, start: now})
				case got == want && isOpen:
					w.spans[i].end = now
					delete(open, f)
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return w
}

// since returns the spans that began at or after t0.
func (w *offTarget) since(t0 time.Time) []offSpan {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []offSpan
	for _, s := range w.spans {
		if !s.start.Before(t0) {
			out = append(out, s)
		}
	}
	return out
}

// close stops the watch (once; later calls do nothing).
// closedSince reports whether a span that began at or after t0 has ended.
func closedSince(w *offTarget, t0 time.Time) bool {
	for _, s := range w.since(t0) {
		if !s.end.IsZero() {
			return true
		}
	}
	return false
}

func (w *offTarget) close() {
	w.once.Do(func() {
		close(w.stop)
		<-w.done
	})
}

// longest is the longest of spans (an open one counted to now) and a
// description of each.
func longest(spans []offSpan) (time.Duration, string) {
	var longest time.Duration
	var parts []string
	for _, s := range spans {
		end := s.end
		if end.IsZero() {
			end = time.Now()
		}
		d := end.Sub(s.start)
		longest = max(longest, d)
		parts = append(parts, fmt.Sprintf("%s was %s for %v", strings.TrimPrefix(filepath.Dir(s.file), cgroupRoot), s.value, d.Round(time.Millisecond)))
	}
	return longest, strings.Join(parts, "; ")
}

// heldWithin is how long a weight the kubelet reset may stay off target
// before the test fails. The target is 1 s (the holder restores
// 200 ms after the last change, then asks systemd); the guest is emulated
// (TCG) and systemd answers D-Bus calls seconds late on a loaded host, so
// the bound is wider and the figures are logged for docs/systemd.md.
const heldWithin = 5 * time.Second

// Seed 000 on a node run by systemd: BestEffort VM pods of 1 and 4 CPUs
// (cgwarden.io/cpu) beside a Burstable hog, all burning on one CPU. The
// kubelet weighs both VM pods 1 and their tier 1, so they split what the
// hog leaves them evenly. `cgwarden fix --apply` (pods as kubectl get
// pods -o json gives them; the kubelet's /pods is that list) sets the
// weights as systemd unit properties and the split becomes 4 ± 10%;
// `cgwarden serve --fix` holds them across the kubelet's resets of the
// tier (one per new pod) and 5 daemon-reloads; `cgwarden revert` puts
// every property and file back.
func TestSystemdKubeletSeed000(t *testing.T) {
	k, _ := nodeGuest(t)
	burn := "while :; do :; done"
	pods := staticPods(t, k, map[string]string{
		"seed000-vm-1": seedPodYAML("seed000-vm-1", `cgwarden.io/cpu: "1"`, "", burn),
		"seed000-vm-4": seedPodYAML("seed000-vm-4", `cgwarden.io/cpu: "4"`, "", burn),
		"seed000-hog":  seedPodYAML("seed000-hog", "", "requests: {cpu: 100m}", burn),
	})
	tree := kubeletTree(t)
	dir := map[string]string{}
	for name, p := range pods {
		sp, ok := tree[p.Metadata.UID]
		if !ok {
			t.Fatalf("pod %s has no pod slice", p.Key())
		}
		dir[name] = filepath.Join(cgroupRoot, sp.cgroup)
		pin(t, dir[name], 1)
	}
	tier := filepath.Join(cgroupRoot, "kubepods.slice/kubepods-besteffort.slice")
	weights := func() string {
		return fmt.Sprintf("tier %s, vm-1 %s, vm-4 %s, hog %s", readFile(tier+"/cpu.weight"), readFile(dir["seed000-vm-1"]+"/cpu.weight"),
			readFile(dir["seed000-vm-4"]+"/cpu.weight"), readFile(dir["seed000-hog"]+"/cpu.weight"))
	}
	measure := func(when string) float64 {
		s := cpuSplit(t, 12*time.Second, dir["seed000-vm-1"], dir["seed000-vm-4"], dir["seed000-hog"])
		ratio := s[1] / s[0]
		t.Logf("SEED000: %s: vm-1 %.3f cores, vm-4 %.3f, hog %.3f: split %.2f (weights: %s)", when, s[0], s[1], s[2], ratio, weights())
		return ratio
	}
	if r := measure("the kubelet's weights"); r > 2 {
		t.Errorf("before any fix the 4-CPU pod got %.2f× the 1-CPU pod's CPU: the kubelet cannot see their sizes, so both weigh the same", r)
	}

	// fix --apply, from the pods as the kubelet lists them.
	podsFile := filepath.Join(t.TempDir(), "pods.json")
	list, err := k.Get(t.Context(), "/pods")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(podsFile, list, 0o600); err != nil {
		t.Fatal(err)
	}
	journalDir := t.TempDir()
	out := cgwardenCLI(t, "fix", "--apply", "--pods", podsFile, "--journal-dir", journalDir, "--only", "size-blind-weights,besteffort-starvation")
	t.Logf("cgwarden fix --apply:\n%s", out)
	if !strings.Contains(out, "systemd: set CPUWeight=") {
		t.Errorf("fix set no weight through systemd on a systemd node:\n%s", out)
	}
	targets := map[string]string{}
	for _, f := range []string{tier, dir["seed000-vm-1"], dir["seed000-vm-4"]} {
		targets[f+"/cpu.weight"] = readFile(f + "/cpu.weight")
	}
	w1, _ := strconv.ParseFloat(targets[dir["seed000-vm-1"]+"/cpu.weight"], 64)
	w4, _ := strconv.ParseFloat(targets[dir["seed000-vm-4"]+"/cpu.weight"], 64)
	if w1 <= 1 || w4/w1 < 3.8 || w4/w1 > 4.2 {
		t.Fatalf("after fix: %s; want the VM pods weighed 4:1 by their sizes", weights())
	}
	for _, u := range []string{"kubepods-besteffort.slice", unitOf(dir["seed000-vm-1"]), unitOf(dir["seed000-vm-4"])} {
		// The property and the file are two reads: the kubelet's QoS
		// reset of the tier (through systemd: both to 1) can fall between
		// them, so the pair is read again for a few seconds before a
		// mismatch counts. A weight written behind systemd's back stays
		// a mismatch.
		var prop, file string
		for try := 0; try < 10; try++ {
			prop = systemdProperty(t, u, "CPUWeight")
			file = readFile(filepath.Join(cgroupRoot, cgroupOfUnit(t, u), "cpu.weight"))
			if prop == file {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
		if prop != file {
			t.Errorf("%s: systemd's CPUWeight is %s, its cpu.weight %s: the weight was not set as the unit's property", u, prop, file)
		}
	}
	time.Sleep(time.Second)
	if r := measure("after cgwarden fix --apply"); r < 3.6 || r > 4.4 {
		t.Errorf("after fix the split is %.2f, want 4 ± 10%%", r)
	}

	// serve --fix holds them: the kubelet resets the tier whenever it
	// makes a pod's cgroup (and every minute). The burners are stopped
	// meanwhile: with one of the emulated guest's two CPUs burnt, the
	// kubelet took 200 s to start each new pod.
	signalAll(t, unix.SIGSTOP, dir["seed000-vm-1"], dir["seed000-vm-4"], dir["seed000-hog"])
	t.Cleanup(func() { signalAll(t, unix.SIGCONT, dir["seed000-vm-1"], dir["seed000-vm-4"], dir["seed000-hog"]) })
	url, serveCmd := startServe(t, "--metadata", "cri", "--cri-socket", realtest.ContainerdSocket, "--trust-size-annotations", "default",
		"--fix", "size-blind-weights,besteffort-starvation", "--journal-dir", journalDir, "--interval", "2s")
	watch := watchOffTarget(targets)
	t.Cleanup(watch.close)
	for i := 1; i <= 3; i++ {
		t0 := time.Now()
		name := fmt.Sprintf("seed000-nudge-%d", i)
		staticPods(t, k, map[string]string{name: seedPodYAML(name, "", "", "exec sleep 86400")})
		// The watch sees every reset: the holder restores 200 ms after
		// the last change at the earliest. It may restore through its
		// re-plan for the new pod's cgroups rather than as a counted
		// reset, so the watch, not the holder's count, says when.
		for !closedSince(watch, t0) {
			if d, what := longest(watch.since(t0)); d > heldWithin {
				t.Fatalf("kubelet reset %d: a held weight is off target for %v: %s", i, d, what)
			}
			if time.Since(t0) > 90*time.Second {
				t.Fatalf("kubelet reset %d: the kubelet did not reset the tier within 90 s of a new pod (weights: %s)", i, weights())
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Second)
		d, what := longest(watch.since(t0))
		t.Logf("SEED000: kubelet reset %d (new pod %s): off target at most %v: %s", i, name, d.Round(time.Millisecond), what)
		if d > heldWithin {
			t.Errorf("kubelet reset %d: a held weight stayed off target %v (bound %v): %s", i, d, heldWithin, what)
		}
	}
	for i := 1; i <= 5; i++ {
		t0 := time.Now()
		rt0 := time.Now()
		if out, err := exec.Command("systemctl", "daemon-reload").CombinedOutput(); err != nil {
			t.Fatalf("daemon-reload: %v: %s", err, out)
		}
		took := time.Since(rt0)
		time.Sleep(time.Second)
		d, what := longest(watch.since(t0))
		t.Logf("SEED000: daemon-reload %d (took %v): off target %v %s", i, took.Round(time.Millisecond), d.Round(time.Millisecond), what)
		if d > heldWithin {
			t.Errorf("daemon-reload %d: a held weight stayed off target %v: %s", i, d, what)
		}
	}
	for f, want := range targets {
		if got := readFile(f); got != want {
			t.Errorf("after the resets and reloads %s is %s, want %s held", f, got, want)
		}
	}
	signalAll(t, unix.SIGCONT, dir["seed000-vm-1"], dir["seed000-vm-4"], dir["seed000-hog"])
	if r := measure("held by cgwarden serve --fix after 3 kubelet resets and 5 daemon-reloads"); r < 3.6 || r > 4.4 {
		t.Errorf("the held split is %.2f, want 4 ± 10%%", r)
	}
	t.Logf("SEED000: the holder's own count: %v resets, %.3f s off target in all, %v plans", metricSum(t, url, "cgwarden_weight_resets_total"),
		metricSum(t, url, "cgwarden_weight_off_target_seconds_total"), metricSum(t, url, "cgwarden_weight_replans_total"))
	stopServe(t, serveCmd)
	watch.close()

	out = cgwardenCLI(t, "revert", "--journal-dir", journalDir)
	t.Logf("cgwarden revert:\n%s", out)
	for _, u := range []string{"kubepods-besteffort.slice", unitOf(dir["seed000-vm-1"]), unitOf(dir["seed000-vm-4"])} {
		file := readFile(filepath.Join(cgroupRoot, cgroupOfUnit(t, u), "cpu.weight"))
		if prop := systemdProperty(t, u, "CPUWeight"); prop != "1" || file != "1" {
			t.Errorf("after revert %s: CPUWeight %s, cpu.weight %s; want the kubelet's 1 back in both", u, prop, file)
		}
	}
}

// unitOf is the unit name of a cgroup directory (its last element).
func unitOf(dir string) string { return filepath.Base(dir) }

// cgroupOfUnit is a unit's cgroup as systemd says (relative to the root).
func cgroupOfUnit(t *testing.T, unit string) string {
	t.Helper()
	cg := systemdProperty(t, unit, "ControlGroup")
	if cg == "" {
		t.Fatalf("unit %s has no ControlGroup", unit)
	}
	return cg
}

// stopServe ends a serve started by startServe and waits for it.
func stopServe(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(unix.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("cgwarden serve did not end within 30 s of SIGTERM")
	}
}

// kubeletPodCPU waits for two of the kubelet's readings of pod key (its
// /stats/summary), both taken after t0 and at least 10 s apart, and
// returns the pod's CPU between them (cores), its working set at the
// second, and when the second was taken.
func kubeletPodCPU(t *testing.T, k *realtest.Kubelet, key string, t0 time.Time) (cores, ws float64, at time.Time) {
	t.Helper()
	get := func(p string) ([]byte, error) { return k.Get(t.Context(), p) }
	var first *figures
	start := time.Now()
	for {
		f, ok := getSummary(t, get)[key]
		switch {
		case !ok || len(f.missing) > 0 || !f.at.After(t0):
		case first == nil:
			first = &f
		case f.at.Sub(first.at) >= 10*time.Second:
			return (f.cpu - first.cpu) / f.at.Sub(first.at).Seconds(), f.ws, f.at
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("the kubelet gave no two readings of %s 10 s apart after %s within 3 min", key, t0.Format(time.RFC3339))
		}
		time.Sleep(2 * time.Second)
	}
}

// burning is how much CPU a "while :; do :; done" container must show to
// count as running: well above nothing, well below the one core it takes
// alone (the guest's two vCPUs are emulated and share the host).
const burning = 0.2

// Seed 003 on a node run by systemd, without emulation: containerd hands
// the runtime systemd's "kubepods-besteffort-pod<uid>.slice:cri-containerd:
// <id>", and the literal-minded runtime (runc behind the misplace wrapper,
// which drops --systemd-cgroup as a runtime without systemd support would)
// makes it one directory at the root. The kubelet then reports the pod's
// CPU as nothing while its container burns a core. `cgwarden serve --fix
// misplaced-container` moves the processes under the pod's slice within
// one interval; the kubelet's figure becomes the container's, and stays so
// across daemon-reloads (systemd leaves a directory it does not manage
// where it is).
func TestSystemdKubeletSeed003(t *testing.T) {
	k, _ := nodeGuest(t)
	pods := staticPods(t, k, map[string]string{
		"seed003": seedPodYAML("seed003", `cgwarden.io/misplace: "true"`, "", "while :; do :; done"),
	})
	p := pods["seed003"]
	id := onlyContainer(t, p)
	sp, ok := kubeletTree(t)[p.Metadata.UID]
	if !ok {
		t.Fatalf("pod %s has no pod slice", p.Key())
	}
	if _, ok := sp.scopes[id]; ok {
		t.Fatalf("the misplace runtime put container %s under its pod (%s): the node does not reproduce the seed", id[:12], sp.scopes[id])
	}
	literal := filepath.Join(cgroupRoot, filepath.Base(sp.cgroup)+":cri-containerd:"+id)
	ps := procs(t, literal)
	if len(ps) == 0 {
		t.Fatalf("no process in %s, the literal directory the seed's runtime makes", literal)
	}
	if c := cpuSplit(t, 5*time.Second, literal)[0]; c < burning {
		t.Fatalf("the misplaced container burns %.3f cores, want at least %.1f", c, burning)
	}
	cores, _, _ := kubeletPodCPU(t, k, p.Key(), time.Now())
	t.Logf("SEED003: misplaced at %s (processes %v); the kubelet's pod CPU %.3f cores", strings.TrimPrefix(literal, cgroupRoot), ps, cores)
	if cores > 0.05 {
		t.Errorf("the kubelet's pod CPU is %.3f cores with the container outside the pod: the seed is not reproduced", cores)
	}

	const interval = 5 * time.Second
	url, serveCmd := startServe(t, "--metadata", "cri", "--cri-socket", realtest.ContainerdSocket,
		"--fix", "misplaced-container", "--journal-dir", t.TempDir(), "--interval", interval.String())
	t0 := time.Now()
	adopted := filepath.Join(cgroupRoot, sp.cgroup, "cri-containerd-"+id+".scope")
	for len(procs(t, literal)) > 0 || len(procs(t, adopted)) == 0 {
		if time.Since(t0) > 2*interval {
			t.Fatalf("after %v the processes are still outside the pod: %s holds %v, %s %v", 2*interval, literal, procs(t, literal), adopted, procs(t, adopted))
		}
		time.Sleep(50 * time.Millisecond)
	}
	moved := time.Now()
	t.Logf("SEED003: cgwarden serve --fix moved %v into %s %v after it was ready (%v processes moved, by its count)", procs(t, adopted), strings.TrimPrefix(adopted, cgroupRoot),
		moved.Sub(t0).Round(time.Millisecond), metricSum(t, url, "cgwarden_adoption_processes_moved_total"))
	cores, _, at := kubeletPodCPU(t, k, p.Key(), moved)
	t.Logf("SEED003: the kubelet's pod CPU %.3f cores, read %v after the move", cores, at.Sub(moved).Round(time.Second))
	if cores < burning {
		t.Errorf("after adoption the kubelet's pod CPU is %.3f cores, want at least %.1f", cores, burning)
	}
	want := procs(t, adopted)
	for i := 1; i <= 3; i++ {
		if out, err := exec.Command("systemctl", "daemon-reload").CombinedOutput(); err != nil {
			t.Fatalf("daemon-reload: %v: %s", err, out)
		}
		if got := procs(t, adopted); !sameInts(got, want) || len(procs(t, literal)) > 0 {
			t.Errorf("after daemon-reload %d: %s holds %v (want %v), %s %v", i, adopted, got, want, literal, procs(t, literal))
		}
	}
	reloaded := time.Now()
	cores, _, _ = kubeletPodCPU(t, k, p.Key(), reloaded)
	t.Logf("SEED003: after 3 daemon-reloads the processes stayed in %s; the kubelet's pod CPU %.3f cores", strings.TrimPrefix(adopted, cgroupRoot), cores)
	if cores < burning {
		t.Errorf("after the daemon-reloads the kubelet's pod CPU is %.3f cores, want at least %.1f", cores, burning)
	}
	stopServe(t, serveCmd)
}

func sameInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[int]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		if seen[x]--; seen[x] < 0 {
			return false
		}
	}
	return true
}

// Seed 003 prevented on a node run by systemd: with `cgwarden nri
// --default-handler` registered (the node's default runtime is the
// literal-minded one for the annotated pod), the plugin sets the
// container's cgroupsPath to the absolute path the kubelet's layout gives
// it, and the literal-minded runtime creates it there, under the pod's
// slice: the kubelet's pod CPU and memory include the container's, the
// 24 MB it wrote among them.
func TestSystemdKubeletSeed003NRI(t *testing.T) {
	k, _ := nodeGuest(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	plugin := exec.Command(exe, "nri", "--default-handler", "--socket", "/var/run/nri/nri.sock", "--learned-file", "", "--listen", addr, "--retry", "500ms")
	plugin.Env = append(os.Environ(), "CGWARDEN_RUN_CLI=1")
	var log bytes.Buffer
	plugin.Stdout, plugin.Stderr = &log, &log
	if err := plugin.Start(); err != nil {
		t.Fatal(err)
	}
	stop := func() {
		if plugin.ProcessState == nil {
			_ = plugin.Process.Kill()
			_ = plugin.Wait()
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("cgwarden nri's log:\n%s", log.String())
		}
	})
	for t0 := time.Now(); metricSumOr(url(addr), "cgwarden_nri_connected") != 1; time.Sleep(200 * time.Millisecond) {
		if time.Since(t0) > 60*time.Second {
			t.Fatalf("cgwarden nri did not register with containerd within 60 s")
		}
	}
	pods := staticPods(t, k, map[string]string{
		"seed003-nri": seedPodYAML("seed003-nri", `cgwarden.io/misplace: "true"`, "", "head -c 24000000 /dev/zero >/dev/shm/fill && while :; do :; done"),
	})
	placed := metricSumOr(url(addr), "cgwarden_nri_containers_total")
	stop() // no other container of the node's default handler is to be placed
	p := pods["seed003-nri"]
	id := onlyContainer(t, p)
	sp, ok := kubeletTree(t)[p.Metadata.UID]
	if !ok {
		t.Fatalf("pod %s has no pod slice", p.Key())
	}
	cg, ok := sp.scopes[id]
	literal := filepath.Join(cgroupRoot, filepath.Base(sp.cgroup)+":cri-containerd:"+id)
	if _, err := os.Stat(literal); err == nil || !ok || len(procs(t, filepath.Join(cgroupRoot, cg))) == 0 {
		t.Fatalf("container %s: under its pod %v (%s), literal directory %s there %v; want it created under the pod's slice\n%s", id[:12], ok, cg, literal, err == nil, log.String())
	}
	cores, ws, _ := kubeletPodCPU(t, k, p.Key(), time.Now())
	t.Logf("SEED003 NRI: container created in %s (plugin's count of containers: %v); the kubelet's pod CPU %.3f cores, working set %.1f MB", cg, placed, cores, ws/1e6)
	if cores < burning || ws < 24e6 {
		t.Errorf("the kubelet's pod CPU %.3f cores and working set %.1f MB; want at least %.1f cores and the 24 MB the container wrote", cores, ws/1e6, burning)
	}
}

func url(addr string) string { return "http://" + addr }

// metricSumOr is metricSum without failing: -1 when /metrics cannot be
// read or parsed (yet).
func metricSumOr(base, name string) float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return -1
	}
	sum := 0.0
	if mf, ok := mfs[name]; ok {
		for _, m := range mf.Metric {
			sum += value(m)
		}
	}
	return sum
}

// freeLoopbackPort is a TCP port free on 127.0.0.1 a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
