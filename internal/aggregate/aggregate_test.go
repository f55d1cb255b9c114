package aggregate

import (
	"bytes"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/snapshot"
	"github.com/cgwarden/cgwarden/internal/stats"
)

const seedPod = "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c"

// scanExample scans both samples of an embedded snapshot and returns the
// second with rates.
func scanExample(t *testing.T, name string) *inventory.Node {
	t.Helper()
	b, ok := examples.Open(name)
	if !ok {
		t.Fatalf("no example %s", name)
	}
	s, err := snapshot.Load(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	n, err := (&inventory.Sampling{}).TakeAll(s.Samples)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func u64(v uint64) *uint64   { return &v }
func i64(v int64) *int64     { return &v }
func f64(v float64) *float64 { return &v }

func TestSeed003MisplacedContainerCountsForItsPod(t *testing.T) {
	n := scanExample(t, "seed-003-k3s-spin")
	p := n.Pod(seedPod)
	if p == nil {
		t.Fatalf("pod %s not found", seedPod)
	}
	// The raw pod cgroup is empty, as in the seed.
	if raw := p.Cgroup.Stats.CPU.UsageNs; raw == nil || *raw != 0 {
		t.Fatalf("raw pod cgroup usage = %v, want 0 (the seed's empty slice)", raw)
	}
	ap := ForPod(p)
	if !ap.Outside || len(ap.Parts) != 2 {
		t.Fatalf("parts = %d, outside = %v; want the pod cgroup and the misplaced container", len(ap.Parts), ap.Outside)
	}
	// Second sample: pod cgroup 0 µs + literal directory 26392435 µs.
	if got := ap.Usage.CPUUsageNs; got == nil || *got != 26392435000 {
		t.Errorf("pod CPU usage = %v ns, want 26392435000", deref(got))
	}
	// 950000 µs over the snapshot's 1 s interval.
	if got := ap.Usage.CPUCores; got == nil || *got < 0.9499 || *got > 0.9501 {
		t.Errorf("pod CPU rate = %v, want 0.95 cores", deref(got))
	}
	// memory.current 27000000 − inactive_file 1903808, plus the empty pod.
	if got := ap.Usage.WorkingSetBytes; got == nil || *got != 25096192 {
		t.Errorf("pod working set = %v, want 25096192", deref(got))
	}
	if got := ap.Usage.RSSBytes; got == nil || *got != 21000000 {
		t.Errorf("pod RSS = %v, want 21000000 (anon)", deref(got))
	}
	if got := ap.Usage.PageFaults; got == nil || *got != 5126 {
		t.Errorf("pod page faults = %v, want 5126", deref(got))
	}
	// Two cgroups with different limits: no single limit bounds the sum.
	if ap.Usage.MemoryLimitBytes != nil {
		t.Errorf("pod limit = %d, want unknown for a pod split over two cgroups", *ap.Usage.MemoryLimitBytes)
	}
	if len(ap.Containers) != 1 || ap.Containers[0].ID[:12] != "c339025b3f0d" {
		t.Fatalf("containers = %+v", ap.Containers)
	}
	if got := ap.Containers[0].Usage.CPUCores; got == nil || *got < 0.9499 || *got > 0.9501 {
		t.Errorf("container CPU rate = %v, want 0.95", deref(got))
	}
	// The container has its own limit: available = 600000000 − 25096192.
	if got := ap.Containers[0].Usage.AvailableBytes(); got == nil || *got != 600000000-25096192 {
		t.Errorf("container available = %v", deref(got))
	}
}

func TestSeed003NestedPodIsItsOwnCgroup(t *testing.T) {
	n := scanExample(t, "seed-003-k3s-spin")
	p := n.Pod("79c5176e2321b3741f55aee0036af2a9")
	if p == nil {
		t.Fatal("static pod not found")
	}
	ap := ForPod(p)
	if ap.Outside || len(ap.Parts) != 1 || ap.Parts[0] != p.Cgroup {
		t.Fatalf("parts = %v, outside = %v; want only the pod cgroup", ap.Parts, ap.Outside)
	}
	raw := p.Cgroup.Stats.CPU.UsageNs
	if raw == nil || ap.Usage.CPUUsageNs == nil || *ap.Usage.CPUUsageNs != *raw {
		t.Errorf("pod CPU = %v, want the pod cgroup's own %v", deref(ap.Usage.CPUUsageNs), deref(raw))
	}
	if c := ap.Containers[0].Usage.CPUUsageNs; c == nil || *c >= *ap.Usage.CPUUsageNs*2 {
		t.Errorf("container %v vs pod %v", deref(c), deref(ap.Usage.CPUUsageNs))
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return "unknown"
	}
	return *p
}

// cg builds a cgroup with CPU usage, rate and working set.
func cg(path string, parent *inventory.Cgroup, usage *uint64, cores *float64, ws *uint64) *inventory.Cgroup {
	c := &inventory.Cgroup{Path: path, Parent: parent, UsageCores: cores}
	c.Stats.CPU.UsageNs = usage
	c.Stats.Memory.WorkingSetBytes = ws
	c.Stats.Memory.UsageBytes = ws
	c.Stats.Memory.LimitBytes = i64(stats.Unlimited)
	if parent != nil {
		parent.Children = append(parent.Children, c)
	}
	return c
}

func TestSynthetic(t *testing.T) {
	root := cg("/", nil, u64(1e12), f64(3), u64(1e9))
	kube := cg("/kubepods", root, u64(5e11), f64(2), u64(5e8))
	pod := cg("/kubepods/podA", kube, u64(300), f64(1.5), u64(3000))
	nested := cg("/kubepods/podA/c1", pod, u64(200), f64(1), u64(2000))
	sandbox := cg("/kubepods/podA/pause", pod, u64(1), f64(0), u64(100))
	outside := cg("/kubepods-podA.slice:cri-containerd:c2", root, u64(50), f64(0.25), u64(500))
	kata := cg("/kata_podA", root, u64(7), f64(0.5), u64(70))
	unknown := cg("/podA-vm-runner", root, nil, nil, u64(9))

	cases := []struct {
		name              string
		pod               *inventory.Pod
		cpu, ws           *uint64
		cores             *float64
		parts, containers int
		outside           bool
		limit             *int64
	}{
		{
			name: "nested only: the pod cgroup's own figure, nothing added",
			pod: &inventory.Pod{UID: "a", Cgroup: pod, Containers: []*inventory.Container{
				{ID: "c1", Cgroup: nested}, {ID: "p", Cgroup: sandbox, Sandbox: true}}},
			cpu: u64(300), cores: f64(1.5), ws: u64(3000), parts: 1, containers: 1, limit: i64(stats.Unlimited),
		},
		{
			name: "one misplaced container and a sandbox outside: pod + both",
			pod: &inventory.Pod{UID: "a", Cgroup: pod, Containers: []*inventory.Container{
				{ID: "c1", Cgroup: nested}, {ID: "c2", Cgroup: outside, Misplaced: true},
				{ID: "k", Cgroup: kata, Misplaced: true, Sandbox: true}}},
			cpu: u64(357), cores: f64(2.25), ws: u64(3570), parts: 3, containers: 2, outside: true,
		},
		{
			name: "no pod cgroup: the sum of the containers",
			pod: &inventory.Pod{UID: "a", Containers: []*inventory.Container{
				{ID: "c2", Cgroup: outside, Misplaced: true}, {ID: "k", Cgroup: kata, Misplaced: true, Sandbox: true}}},
			cpu: u64(57), cores: f64(0.75), ws: u64(570), parts: 2, containers: 1, outside: true,
		},
		{
			name: "a part with unknown CPU makes the pod's CPU unknown, not smaller",
			pod: &inventory.Pod{UID: "a", Cgroup: pod, Containers: []*inventory.Container{
				{ID: "c2", Cgroup: outside, Misplaced: true}, {ID: "vm", Cgroup: unknown, Misplaced: true}}},
			cpu: nil, cores: nil, ws: u64(3509), parts: 3, containers: 2, outside: true,
		},
		{
			name: "a nested container flagged misplaced by the scan is still inside: not added",
			pod: &inventory.Pod{UID: "a", Cgroup: pod, Containers: []*inventory.Container{
				{ID: "c1", Cgroup: nested, Misplaced: true}}},
			cpu: u64(300), cores: f64(1.5), ws: u64(3000), parts: 1, containers: 1, limit: i64(stats.Unlimited),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ap := ForPod(tc.pod)
			if len(ap.Parts) != tc.parts || ap.Outside != tc.outside || len(ap.Containers) != tc.containers {
				t.Fatalf("parts %d outside %v containers %d; want %d %v %d", len(ap.Parts), ap.Outside, len(ap.Containers), tc.parts, tc.outside, tc.containers)
			}
			if !eqU(ap.Usage.CPUUsageNs, tc.cpu) || !eqU(ap.Usage.WorkingSetBytes, tc.ws) || !eqF(ap.Usage.CPUCores, tc.cores) {
				t.Errorf("cpu %v ws %v cores %v; want %v %v %v", deref(ap.Usage.CPUUsageNs), deref(ap.Usage.WorkingSetBytes), deref(ap.Usage.CPUCores), deref(tc.cpu), deref(tc.ws), deref(tc.cores))
			}
			if (ap.Usage.MemoryLimitBytes == nil) != (tc.limit == nil) || tc.limit != nil && *ap.Usage.MemoryLimitBytes != *tc.limit {
				t.Errorf("limit %v, want %v", deref(ap.Usage.MemoryLimitBytes), deref(tc.limit))
			}
		})
	}
}

func eqU(a, b *uint64) bool  { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
func eqF(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func TestPodsKeepsNodeOrder(t *testing.T) {
	root := cg("/", nil, u64(1), nil, nil)
	a := cg("/a", root, u64(1), nil, nil)
	b := cg("/b", root, u64(2), nil, nil)
	n := &inventory.Node{Root: root, Pods: []*inventory.Pod{{UID: "b", Cgroup: b}, {UID: "a", Cgroup: a}}}
	ps := Pods(n)
	if len(ps) != 2 || ps[0].UID != "b" || ps[1].UID != "a" {
		t.Fatalf("got %v", ps)
	}
}

func TestAvailableBytes(t *testing.T) {
	for _, tc := range []struct {
		limit *int64
		ws    *uint64
		want  *uint64
	}{
		{i64(1000), u64(300), u64(700)},
		{i64(1000), u64(3000), u64(0)}, // over the limit (reclaim lag): floor 0
		{i64(stats.Unlimited), u64(300), nil},
		{nil, u64(300), nil},
		{i64(1000), nil, nil},
	} {
		got := Usage{MemoryLimitBytes: tc.limit, WorkingSetBytes: tc.ws}.AvailableBytes()
		if !eqU(got, tc.want) {
			t.Errorf("limit %v ws %v: got %v want %v", deref(tc.limit), deref(tc.ws), deref(got), deref(tc.want))
		}
	}
}

func TestNodeUsage(t *testing.T) {
	root := cg("/", nil, u64(5e9), f64(2), nil)
	root.Stats.Memory.UsageBytes = nil
	root.Stats.Memory.InactiveFileBytes = u64(1 << 20)
	n := &inventory.Node{Root: root, Time: time.Unix(0, 0)}
	// v2 root without memory.current and no meminfo: memory unknown.
	if u := NodeUsage(n); u.WorkingSetBytes != nil || u.MemoryUsageBytes != nil || *u.CPUUsageNs != 5e9 {
		t.Errorf("no meminfo: %+v", u)
	}
	n.Meminfo = &stats.Meminfo{TotalBytes: 8 << 30, FreeBytes: 6 << 30}
	u := NodeUsage(n)
	if !eqU(u.MemoryUsageBytes, u64(2<<30)) || !eqU(u.WorkingSetBytes, u64(2<<30-1<<20)) {
		t.Errorf("meminfo: usage %v ws %v", deref(u.MemoryUsageBytes), deref(u.WorkingSetBytes))
	}
	if a := u.AvailableBytes(); !eqU(a, u64(8<<30-(2<<30-1<<20))) {
		t.Errorf("available %v", deref(a))
	}
	// v1: the root has its own usage; meminfo only gives the limit.
	root.Stats.Memory.UsageBytes = u64(3 << 30)
	root.Stats.Memory.WorkingSetBytes = u64(1 << 30)
	u = NodeUsage(n)
	if !eqU(u.WorkingSetBytes, u64(1<<30)) || *u.MemoryLimitBytes != 8<<30 {
		t.Errorf("v1 root: %+v", u)
	}
}
