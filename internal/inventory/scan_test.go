package inventory

import (
	"bytes"
	"io/fs"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// Seed 003 (internal/examples/snapshots/seed-003-k3s-spin.txtar): the
// runwasi shim put the Spin app's container cgroup at the root as the
// literal directory "<pod slice>:cri-containerd:<id>", so the pod's own
// slice is empty.
const (
	seedPodUID      = "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c"
	seedPodCgroup   = "/kubepods.slice/kubepods-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice"
	seedContainerID = "c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00"
	seedMisplaced   = "/kubepods-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice:cri-containerd:" + seedContainerID
	seedStaticUID   = "79c5176e2321b3741f55aee0036af2a9"
	seedStaticCID   = "05b01919e2bced0c3c3d45f1065d500954fbf9e83205c5ccff00024b2e7d7821"
)

// scanSnapshot scans every sample of a snapshot and rates the last
// against the one before, as the CLI does.
func scanSnapshot(t *testing.T, raw []byte) *Node {
	t.Helper()
	s, err := snapshot.Load(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	n, err := (&Sampling{}).TakeAll(s.Samples)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSeed003(t *testing.T) {
	raw, ok := examples.Open("seed-003-k3s-spin")
	if !ok {
		t.Fatal("no embedded seed-003-k3s-spin")
	}
	n := scanSnapshot(t, raw)
	if n.CPUs != 8 || n.Driver != layout.Systemd || n.KubeRoot == nil || n.KubeRoot.Path != "/kubepods.slice" {
		t.Fatalf("node: %d CPUs, driver %q, kube root %v", n.CPUs, n.Driver, n.KubeRoot)
	}
	if len(n.Errors) != 0 {
		t.Errorf("read errors: %v", n.Errors)
	}

	p := n.Pod(seedPodUID)
	if p == nil {
		t.Fatalf("pod %s not found; pods: %v", seedPodUID, n.Pods)
	}
	if p.Cgroup == nil || p.Cgroup.Path != seedPodCgroup || p.QoS != layout.Guaranteed {
		t.Fatalf("pod cgroup %v, QoS %q", p.Cgroup, p.QoS)
	}
	if len(p.Containers) != 1 {
		t.Fatalf("pod has %d containers, want the one misplaced", len(p.Containers))
	}
	c := p.Containers[0]
	if c.ID != seedContainerID || c.Runtime != "containerd" || !c.Misplaced || c.Sandbox || c.Cgroup.Path != seedMisplaced {
		t.Errorf("container %+v at %s: want %s, containerd, misplaced at %s", c, c.Cgroup.Path, seedContainerID, seedMisplaced)
	}

	// The pod's own cgroup used nothing between the samples; the
	// misplaced container used (26392435 − 25442435) µs in 1 s.
	if u := p.Cgroup.UsageCores; u == nil || *u != 0 {
		t.Errorf("pod cgroup usage %v cores, want exactly 0", deref(u))
	}
	if u := c.Cgroup.UsageCores; u == nil || math.Abs(*u-0.95) > 1e-9 {
		t.Errorf("misplaced container usage %v cores, want 0.95", deref(u))
	}

	// The static pod's container is where the kubelet put it.
	sp := n.Pod(seedStaticUID)
	if sp == nil || len(sp.Containers) != 1 {
		t.Fatalf("static pod %s: %+v", seedStaticUID, sp)
	}
	if sc := sp.Containers[0]; sc.ID != seedStaticCID || sc.Misplaced || sp.QoS != layout.Burstable {
		t.Errorf("static pod container %+v (QoS %q): want %s, not misplaced, burstable", sc, sp.QoS, seedStaticCID)
	}
	if len(n.Pods) != 2 || len(n.Unattached) != 0 {
		t.Errorf("%d pods, %d unattached; want 2 and 0", len(n.Pods), len(n.Unattached))
	}

	// Guarantees at the root: weights 100 (init.scope), 100 (the
	// misplaced container), 313 (kubepods), 100, 100 → 8 × 100/713 for the
	// misplaced container, competing with the whole kubepods tree.
	if g := c.Cgroup.GuaranteedCores; math.Abs(g-8*100.0/713) > 1e-9 {
		t.Errorf("misplaced container guaranteed %v, want %v", g, 8*100.0/713)
	}
	// The pod slice: kubepods × 20/(4+1+20) (burstable 4, besteffort 1,
	// the pod 20: the kubelet's linear weight of 512 shares for 500m).
	if g, want := p.Cgroup.GuaranteedCores, 8*313.0/713*20/25; math.Abs(g-want) > 1e-9 {
		t.Errorf("pod guaranteed %v, want %v", g, want)
	}
}

func deref(p *float64) any {
	if p == nil {
		return "unknown"
	}
	return *p
}

// memFS is a node as a map of host paths to file contents; a directory
// exists when a file lies beneath it.
type memFS map[string]string

func (m memFS) ReadFile(p string) ([]byte, error) {
	if s, ok := m[p]; ok {
		return []byte(s), nil
	}
	return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
}

func (m memFS) ReadDirs(p string) ([]string, error) {
	kids, found := map[string]bool{}, false
	for f := range m {
		d := path.Dir(f)
		if d == p {
			found = true
		}
		if rest, ok := strings.CutPrefix(d, p+"/"); ok {
			found = true
			kids[strings.Split(rest, "/")[0]] = true
		}
	}
	if !found {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	out := make([]string, 0, len(kids))
	for k := range kids {
		out = append(out, k)
	}
	slices.Sort(out)
	return out, nil
}

const v1Mountinfo = "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n" +
	"33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n"

// lines is n pids, one per line.
func lines(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(strconv.Itoa(100+i) + "\n")
	}
	return b.String()
}

func scanMem(t *testing.T, m memFS) *Node {
	t.Helper()
	sc, err := Open(m)
	if err != nil {
		t.Fatal(err)
	}
	n, err := sc.Scan(time.Unix(1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestGuaranteeV1(t *testing.T) {
	// 4 CPUs. At the root: /a (1024) and /b (2048); the root's own 300
	// threads are not counted (see Scanner.guarantee). /b is not a leaf
	// and holds 2 threads itself, which compete with its children /b/b1
	// (512) and /b/b2 (1536) like two groups of 1024 each. /c has no
	// readable weight and counts at the default 1024 (and so does /c/c1).
	// /b/b2/x is a leaf: its 7 threads are not read (no children to
	// compete with).
	m := memFS{
		"/proc/self/mountinfo":                 v1Mountinfo,
		"/sys/devices/system/cpu/online":       "0-3\n",
		"/sys/fs/cgroup/cpu/cpu.shares":        "1024\n",
		"/sys/fs/cgroup/cpu/tasks":             lines(300),
		"/sys/fs/cgroup/cpu/a/cpu.shares":      "1024\n",
		"/sys/fs/cgroup/cpu/b/cpu.shares":      "2048\n",
		"/sys/fs/cgroup/cpu/b/tasks":           "4100\n4101\n",
		"/sys/fs/cgroup/cpu/b/b1/cpu.shares":   "512\n",
		"/sys/fs/cgroup/cpu/b/b2/cpu.shares":   "1536\n",
		"/sys/fs/cgroup/cpu/b/b2/x/cpu.shares": "2\n",
		"/sys/fs/cgroup/cpu/b/b2/x/tasks":      lines(7),
		"/sys/fs/cgroup/cpu/c/tasks":           "",
		"/sys/fs/cgroup/cpu/c/c1/cpu.shares":   "1024\n",
	}
	n := scanMem(t, m)
	// Root: 1024 + 2048 + 1024 (c, default) = 4096.
	a, b, c := 4*1024.0/4096, 4*2048.0/4096, 4*1024.0/4096
	// Inside b: 2 threads × 1024 + 512 + 1536 = 4096.
	b1, b2 := b*512/4096, b*1536/4096
	want := map[string]float64{
		"/": 4, "/a": a, "/b": b, "/c": c, "/c/c1": c,
		"/b/b1": b1, "/b/b2": b2,
		"/b/b2/x": b2, // an only child gets all of its parent
	}
	for p, w := range want {
		cg := n.Find(p)
		if cg == nil {
			t.Errorf("%s not found", p)
			continue
		}
		if !near(cg.GuaranteedCores, w) {
			t.Errorf("%s: guaranteed %v, want %v", p, cg.GuaranteedCores, w)
		}
	}
	if th := n.Find("/b").Stats.Threads; th == nil || *th != 2 {
		t.Errorf("/b threads %v, want 2", th)
	}
	if th := n.Find("/b/b2/x").Stats.Threads; th != nil {
		t.Errorf("leaf threads read: %d", *th)
	}
	if th := n.Root.Stats.Threads; th != nil {
		t.Errorf("root threads read: %d", *th)
	}
	// The hand computation, written out: 1, 2, 0.25, 0.75.
	if !near(a, 1) || !near(b, 2) || !near(b1, 0.25) || !near(b2, 0.75) {
		t.Fatalf("the test's own arithmetic is off: %v %v %v %v", a, b, b1, b2)
	}
}

func TestGuaranteeV2(t *testing.T) {
	// v2: weights 100 and 300 under the root on 8 CPUs; a process listed in
	// a non-leaf cgroup.procs (impossible with controllers enabled, but a
	// snapshot may say so) is not counted.
	m := memFS{
		"/proc/self/mountinfo":             "35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
		"/sys/devices/system/cpu/online":   "0-7\n",
		"/sys/fs/cgroup/cgroup.procs":      "1\n",
		"/sys/fs/cgroup/p/cpu.weight":      "100\n",
		"/sys/fs/cgroup/q/cpu.weight":      "300\n",
		"/sys/fs/cgroup/q/cgroup.procs":    "77\n",
		"/sys/fs/cgroup/q/q1/cpu.weight":   "1\n",
		"/sys/fs/cgroup/q/q2/cpu.weight":   "9\n",
		"/sys/fs/cgroup/q/q2/cgroup.procs": "78\n",
	}
	n := scanMem(t, m)
	for p, w := range map[string]float64{"/p": 2, "/q": 6, "/q/q1": 0.6, "/q/q2": 5.4} {
		if g := n.Find(p).GuaranteedCores; !near(g, w) {
			t.Errorf("%s: guaranteed %v, want %v", p, g, w)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	good := map[string]int{
		"0":         1,
		"0-7\n":     8,
		"0-3,5,7-8": 7,
		"1-1":       1,
		"0-8191":    8192,
		" 2,4,6 ":   3,
		"0-1048575": 1 << 20,
	}
	for in, want := range good {
		if got, err := ParseCPUList(in); err != nil || got != want {
			t.Errorf("ParseCPUList(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	bad := []string{
		"", "\n", "a", "-1", "0-", "-", "3-1", "0,,1", "0-1-2", "1,0", "0,0", "0-3,2-5",
		"0-1048576",             // more CPUs than any kernel
		"0-9223372036854775807", // would overflow the count
		"0-1048575,1048576-1048577",
		"99999999999999999999",
		strings.Repeat("0-1,", 1000),
	}
	for _, in := range bad {
		if got, err := ParseCPUList(in); err == nil {
			t.Errorf("ParseCPUList(%q) = %d, want an error", in, got)
		} else if len(err.Error()) > 120 {
			t.Errorf("ParseCPUList error is %d bytes long", len(err.Error()))
		}
	}
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-7", "0-3,5,7-8", "0-9223372036854775807", "1,0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseCPUList(s)
		if err == nil && (n < 1 || n > maxCPUs) {
			t.Fatalf("ParseCPUList(%q) = %d", s, n)
		}
	})
}

func TestRate(t *testing.T) {
	base := func(usage map[string]string) memFS {
		m := memFS{
			"/proc/self/mountinfo":           v1Mountinfo,
			"/sys/devices/system/cpu/online": "0-1\n",
		}
		for p, u := range usage {
			m["/sys/fs/cgroup/cpu"+p+"/cpu.shares"] = "1024\n"
			if u != "" {
				m["/sys/fs/cgroup/cpuacct"+p+"/cpuacct.usage"] = u
			}
		}
		return m
	}
	prev := scanMem(t, base(map[string]string{
		"/steady":   "1000000000\n",
		"/vanished": "5000000000\n",
		"/reset":    "9000000000\n", // removed and recreated: counter restarts
		"/unknown":  "1000\n",
		"/idle":     "42\n",
	}))
	curFS := base(map[string]string{
		"/steady":  "4000000000\n", // +3 s of CPU
		"/reset":   "1000000\n",
		"/unknown": "",
		"/idle":    "42\n",
		"/new":     "7000000000\n",
	})
	sc, err := Open(curFS)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := sc.Scan(prev.Time.Add(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	Rate(prev, cur)
	if u := cur.Find("/steady").UsageCores; u == nil || !near(*u, 1.5) {
		t.Errorf("/steady: %v cores, want 1.5", deref(u))
	}
	if u := cur.Find("/idle").UsageCores; u == nil || *u != 0 {
		t.Errorf("/idle: %v cores, want 0", deref(u))
	}
	for _, p := range []string{"/reset", "/unknown", "/new"} {
		if u := cur.Find(p).UsageCores; u != nil {
			t.Errorf("%s: %v cores, want unknown", p, *u)
		}
	}
	if cur.Find("/vanished") != nil {
		t.Error("/vanished is in the second scan")
	}

	// Time that did not move forward gives no rate at all.
	again, _ := sc.Scan(prev.Time)
	Rate(prev, again)
	again.Root.Walk(func(c *Cgroup) {
		if c.UsageCores != nil {
			t.Errorf("%s: rate %v over zero time", c.Path, *c.UsageCores)
		}
	})
}

func TestScanBaseMissing(t *testing.T) {
	sc, err := Open(memFS{"/proc/self/mountinfo": v1Mountinfo, "/sys/devices/system/cpu/online": "0\n", "/sys/fs/cgroup/cpu/cpu.shares": "1024\n"})
	if err != nil {
		t.Fatal(err)
	}
	sc.Base = "/does-not-exist"
	if _, err := sc.Scan(time.Now()); err == nil || !strings.Contains(err.Error(), "listing the cgroup tree") {
		t.Errorf("scan of a missing base: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name string
		fs   memFS
		want string
	}{
		{"no mountinfo", memFS{}, "reading mounts"},
		{"no cgroup", memFS{"/proc/self/mountinfo": "22 27 0:21 / /proc rw - proc proc rw\n"}, "no cgroup hierarchy"},
		{"no CPU list", memFS{"/proc/self/mountinfo": v1Mountinfo}, "reading CPU count"},
		{"bad CPU list", memFS{"/proc/self/mountinfo": v1Mountinfo, "/sys/devices/system/cpu/online": "lots\n"}, "bad CPU list"},
	}
	for _, tc := range tests {
		if _, err := Open(tc.fs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestAttachOutsideShapes(t *testing.T) {
	// Shapes that name no pod UID are attached through metadata: Kata's
	// kata_<sandbox id> beside the pod (by sandbox ID), NeonVM's
	// /<pod>-vm-runner (by pod name), and a container-shaped cgroup outside
	// kubepods (by container ID). Without metadata they stay unattached.
	const (
		uid = "0f3c4d2a-8b1e-4f6a-9c7d-2e5b8a1f0c3d"
		sbx = "6a3f1e9b0c2d4e5f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f"
		cid = "c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00"
	)
	m := memFS{
		"/proc/self/mountinfo":                                                    "35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
		"/sys/devices/system/cpu/online":                                          "0-3\n",
		"/sys/fs/cgroup/kubepods/besteffort/pod" + uid + "/cpu.weight":            "1\n",
		"/sys/fs/cgroup/kubepods/besteffort/kata_" + sbx + "/cpu.weight":          "1\n",
		"/sys/fs/cgroup/compute-quiet-river-vm-runner/cpu.weight":                 "100\n",
		"/sys/fs/cgroup/system.slice/cri-containerd-" + cid + ".scope/cpu.weight": "100\n",
	}
	n := scanMem(t, m)
	if n.Pod(uid) == nil || len(n.Pod(uid).Containers) != 0 || len(n.Unattached) != 3 {
		t.Fatalf("without metadata: pod %+v, %d unattached (want 3): %v", n.Pod(uid), len(n.Unattached), n.Unattached)
	}

	sc, err := Open(m)
	if err != nil {
		t.Fatal(err)
	}
	sc.Meta = metadata.NewSet([]metadata.Pod{{
		UID: uid, Name: "compute-quiet-river", Namespace: "default", QoS: layout.BestEffort, SandboxID: sbx,
		Containers: []metadata.Container{{Name: "app", ID: cid}},
	}})
	n, err = sc.Scan(time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	p := n.Pod(uid)
	if p == nil || p.Name != "compute-quiet-river" || len(n.Unattached) != 0 {
		t.Fatalf("pod %+v, unattached %v", p, n.Unattached)
	}
	got := map[string]*Container{}
	for _, c := range p.Containers {
		got[c.Cgroup.Path] = c
	}
	kata := got["/kubepods/besteffort/kata_"+sbx]
	if kata == nil || !kata.Sandbox || !kata.Misplaced || kata.ID != sbx || kata.Runtime != "kata" {
		t.Errorf("kata sandbox beside the pod: %+v", kata)
	}
	runner := got["/compute-quiet-river-vm-runner"]
	if runner == nil || !runner.Misplaced || runner.Sandbox {
		t.Errorf("VM runner: %+v", runner)
	}
	ctr := got["/system.slice/cri-containerd-"+cid+".scope"]
	if ctr == nil || !ctr.Misplaced || ctr.Name != "app" || ctr.Runtime != "containerd" {
		t.Errorf("container outside kubepods: %+v", ctr)
	}
	if len(p.Containers) != 3 {
		t.Errorf("%d containers, want 3", len(p.Containers))
	}
}

// The kubelet's root at the top wins over a kubelet-shaped tree nested in
// a cgroup whose name sorts first (seen in the cluster lane: the agent
// took a host test's scratch /cgwarden-test-<hex>/kubepods.slice for the
// kubelet's root, adopted the scratch's misplaced container and left the
// node's own alone).
func TestTopKubeRootWins(t *testing.T) {
	const (
		uid  = "0f3c4d2a-8b1e-4f6a-9c7d-2e5b8a1f0c3d"
		fake = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	)
	m := memFS{
		"/proc/self/mountinfo":           "35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
		"/sys/devices/system/cpu/online": "0-3\n",
		"/sys/fs/cgroup/cgwarden-test-1a2b3c4d/kubepods.slice/kubepods-pod" + strings.ReplaceAll(fake, "-", "_") + ".slice/cpu.weight": "100\n",
		"/sys/fs/cgroup/kubepods/besteffort/pod" + uid + "/cpu.weight":                                                                 "1\n",
	}
	n := scanMem(t, m)
	if n.KubeRoot == nil || n.KubeRoot.Path != "/kubepods" || n.Driver != layout.Cgroupfs {
		t.Fatalf("kubelet root %+v (driver %s), want /kubepods (cgroupfs)", n.KubeRoot, n.Driver)
	}
	if n.Pod(uid) == nil {
		t.Errorf("the node's pod is not found")
	}
	if n.Pod(fake) != nil {
		t.Errorf("the nested tree's pod is taken for one of the node's")
	}
	if nested := n.Find("/cgwarden-test-1a2b3c4d/kubepods.slice"); nested == nil || nested.Identity.Shape != "second-kubepods-root" {
		t.Errorf("the nested root: %+v", nested)
	}
}

// A kubepods-shaped tree under a sibling that sorts first (a test's
// scratch cgroup /cgwarden-test-…/kubepods, beside the kubelet's own on
// the cluster lane's shared host) does not become the node's root: the
// kubelet's /kubepods is walked first, its pods are the node's, and the
// scratch tree is a second root, foreign. The tree keeps its order.
func TestKubeRootBeforeScratchLookalike(t *testing.T) {
	const (
		real    = "11111111-2222-3333-4444-555555555555"
		scratch = "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c"
	)
	m := memFS{
		"/proc/self/mountinfo":           "35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
		"/sys/devices/system/cpu/online": "0-3\n",
		"/sys/fs/cgroup/cgwarden-test-b2ec7bee/kubepods/besteffort/pod" + scratch + "/cpu.weight": "1\n",
		"/sys/fs/cgroup/kubepods/besteffort/pod" + real + "/cpu.weight":                           "1\n",
	}
	n := scanMem(t, m)
	if n.KubeRoot == nil || n.KubeRoot.Path != "/kubepods" {
		t.Fatalf("kube root %v, want /kubepods", n.KubeRoot)
	}
	if n.Pod(real) == nil || n.Pod(scratch) != nil || len(n.Pods) != 1 {
		t.Errorf("pods %v: want the kubelet's %s only", n.Pods, real)
	}
	var names []string
	for _, c := range n.Root.Children {
		names = append(names, c.Path)
	}
	if strings.Join(names, " ") != "/cgwarden-test-b2ec7bee /kubepods" {
		t.Errorf("root's children %v: the walk order changed the tree's", names)
	}
	second := n.Root.Children[0].Children[0]
	if second.Identity.Kind != layout.Foreign || second.Identity.Shape != "second-kubepods-root" {
		t.Errorf("the scratch lookalike %s: %+v, want a foreign second-kubepods-root", second.Path, second.Identity)
	}
}
