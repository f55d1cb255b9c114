package snapshot_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inspect"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// A minimal valid snapshot: a v2 node with one cgroup.
const minimal = `cgwarden snapshot v1
taken: 2024-08-21T17:28:32Z
# a note
-- /proc/self/mountinfo --
35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
-- /sys/devices/system/cpu/online --
0-3
-- /sys/fs/cgroup/a/cpu.weight --
100
-- /sys/fs/cgroup/empty/ --
`

func TestLoadMinimal(t *testing.T) {
	s, err := snapshot.Load(strings.NewReader(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Samples) != 1 || !s.Samples[0].Time.Equal(time.Date(2024, 8, 21, 17, 28, 32, 0, time.UTC)) {
		t.Fatalf("samples %+v", s.Samples)
	}
	if s.Header["taken"] != "2024-08-21T17:28:32Z" || !slices.Equal(s.Notes, []string{"a note"}) {
		t.Errorf("header %v, notes %q", s.Header, s.Notes)
	}
	fsys := s.Samples[0].FS
	if b, err := fsys.ReadFile("/sys/fs/cgroup/a/cpu.weight"); err != nil || string(b) != "100\n" {
		t.Errorf("cpu.weight = %q, %v", b, err)
	}
	if _, err := fsys.ReadFile("/sys/fs/cgroup/a/cpu.max"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
	if d, err := fsys.ReadDirs("/sys/fs/cgroup"); err != nil || !slices.Equal(d, []string{"a", "empty"}) {
		t.Errorf("ReadDirs(/sys/fs/cgroup) = %q, %v", d, err)
	}
	if d, err := fsys.ReadDirs("/sys/fs/cgroup/empty"); err != nil || len(d) != 0 {
		t.Errorf("ReadDirs(empty) = %q, %v", d, err)
	}
	if _, err := fsys.ReadDirs("/sys/fs/cgroup/nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadDirs(nope): %v, want ErrNotExist", err)
	}
}

func TestLoadHostile(t *testing.T) {
	withSection := func(name, data string) string { return minimal + "-- " + name + " --\n" + data }
	tests := []struct {
		name    string
		in      string
		section string // the LoadError's section, "" for none
		why     string // part of the message
	}{
		{"empty", "", "", "not a cgwarden snapshot"},
		{"missing header line", strings.TrimPrefix(minimal, "cgwarden snapshot v1\n"), "", "not a cgwarden snapshot"},
		{"other version", strings.Replace(minimal, "v1", "v9", 1), "", "not a cgwarden snapshot"},
		{"header not key value", strings.Replace(minimal, "# a note", "just words", 1), "", `header line "just words"`},
		{"dot dot", withSection("/sys/fs/cgroup/../../etc/shadow", "x\n"), "/sys/fs/cgroup/../../etc/shadow", "not clean"},
		{"dot", withSection("/sys/fs/cgroup/./a/cpu.max", "x\n"), "/sys/fs/cgroup/./a/cpu.max", "not clean"},
		{"relative", withSection("sys/fs/cgroup/a/cpu.max", "x\n"), "sys/fs/cgroup/a/cpu.max", "not absolute"},
		{"double slash", withSection("/sys/fs/cgroup//a/cpu.max", "x\n"), "/sys/fs/cgroup//a/cpu.max", "not clean"},
		{"NUL", withSection("/sys/fs/cgroup/a\x00/cpu.max", "x\n"), "/sys/fs/cgroup/a\x00/cpu.max", "NUL"},
		{"too long", withSection("/sys/fs/cgroup/"+strings.Repeat("a", snapshot.MaxPathLen), "x\n"), "/sys/fs/cgroup/" + strings.Repeat("a", snapshot.MaxPathLen), "longer than"},
		{"outside every mount", withSection("/etc/shadow", "root:x:0:0\n"), "/etc/shadow", "not beneath a cgroup mount"},
		{"mount prefix without slash", withSection("/sys/fs/cgroupX/cpu.max", "x\n"), "/sys/fs/cgroupX/cpu.max", "not beneath a cgroup mount"},
		{"directory outside", withSection("/etc/", ""), "/etc/", "not beneath a cgroup mount"},
		{"second sample outside", withSection("next:/var/run/secret", "x\n") + "", "/var/run/secret", "not beneath"},
		{"duplicate section", withSection("/sys/fs/cgroup/a/cpu.weight", "200\n"), "/sys/fs/cgroup/a/cpu.weight", "appears twice"},
		{"duplicate next section", "cgwarden snapshot v1\ninterval: 1s\n" + strings.SplitN(minimal, "\n", 4)[3] + "-- next:/sys/fs/cgroup/a/cpu.weight --\n1\n-- next:/sys/fs/cgroup/a/cpu.weight --\n2\n", "next:/sys/fs/cgroup/a/cpu.weight", "appears twice"},
		{"next removes a directory the first sample lacks", withSection("next-gone:/sys/fs/cgroup/never/", ""), "next-gone:/sys/fs/cgroup/never/", "the first sample has no such directory"},
		{"next removes a file", withSection("next-gone:/sys/fs/cgroup/a/cpu.weight", ""), "next-gone:/sys/fs/cgroup/a/cpu.weight", "must be a clean absolute path ending in /"},
		{"next removes the root", withSection("next-gone:/", ""), "next-gone:/", "must be a clean absolute path ending in /"},
		{"failed read outside the mounts", withSection("failed:/etc/shadow", "permission denied\n"), "failed:/etc/shadow", "not beneath a cgroup mount"},
		{"failed read without a reason", withSection("failed:/sys/fs/cgroup/a/cpu.max", "\n"), "failed:/sys/fs/cgroup/a/cpu.max", "one line of at most"},
		{"failed read of a directory", withSection("failed:/sys/fs/cgroup/a/", "EIO\n"), "failed:/sys/fs/cgroup/a/", "must name a file"},
		{"next adds a directory outside the mounts", "cgwarden snapshot v1\ninterval: 1s\n" + strings.SplitN(minimal, "\n", 4)[3] + "-- next:/etc/new/ --\n", "/etc/new/", "not beneath a cgroup mount"},
		{"no mountinfo", strings.Replace(minimal, "-- /proc/self/mountinfo --\n35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "", 1), "", "no /proc/self/mountinfo section"},
		{"bad mountinfo", strings.Replace(minimal, "35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw", "35 24 0:30 / /sys/fs/cgroup rw cgroup2", 1), "/proc/self/mountinfo", "mountinfo line 1"},
		{"second sample without interval", minimal + "-- next:/sys/fs/cgroup/a/cpu.weight --\n200\n", "", `needs an "interval" header`},
		{"interval not a duration", strings.Replace(minimal, "# a note", "interval: soon", 1) + "-- next:/sys/fs/cgroup/a/cpu.weight --\n200\n", "", `interval "soon"`},
		{"negative interval", strings.Replace(minimal, "# a note", "interval: -1s", 1) + "-- next:/sys/fs/cgroup/a/cpu.weight --\n200\n", "", `interval "-1s"`},
		{"zero interval", strings.Replace(minimal, "# a note", "interval: 0s", 1) + "-- next:/sys/fs/cgroup/a/cpu.weight --\n200\n", "", `interval "0s"`},
		{"interval too long", strings.Replace(minimal, "# a note", "interval: 48h", 1) + "-- next:/sys/fs/cgroup/a/cpu.weight --\n200\n", "", `interval "48h"`},
		{"bad taken", strings.Replace(minimal, "2024-08-21T17:28:32Z", "yesterday", 1), "", `header taken: "yesterday" is not an RFC 3339 time`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := snapshot.Load(strings.NewReader(tc.in))
			var le *snapshot.LoadError
			if !errors.As(err, &le) {
				t.Fatalf("Load = %v, %v; want a *LoadError", s, err)
			}
			if s != nil {
				t.Error("a snapshot came back beside the error")
			}
			if le.Section != tc.section || !strings.Contains(le.Why, tc.why) {
				t.Errorf("error %q: section %q, why %q; want section %q, why containing %q", err, le.Section, le.Why, tc.section, tc.why)
			}
			if !strings.HasPrefix(err.Error(), "snapshot: ") {
				t.Errorf("error %q does not say it is about the snapshot", err)
			}
		})
	}
}

// zeros is a reader of n zero bytes, so that huge inputs cost no memory
// to describe.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > z.n {
		p = p[:z.n]
	}
	clear(p)
	z.n -= int64(len(p))
	return len(p), nil
}

func TestLoadSizeLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 256 MiB")
	}
	// A plain file one byte over the limit, streamed.
	big := io.MultiReader(strings.NewReader(minimal), &zeros{snapshot.MaxBytes})
	_, err := snapshot.Load(big)
	var le *snapshot.LoadError
	if !errors.As(err, &le) || !strings.Contains(le.Why, "larger than 256 MiB") {
		t.Errorf("oversized plain file: %v, want a size error", err)
	}

	// A gzip bomb: a few MiB at most that inflate past the limit. Load
	// stops reading at the limit.
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestSpeed)
	if _, err := io.Copy(zw, io.MultiReader(strings.NewReader(minimal), &zeros{snapshot.MaxBytes + 1<<20})); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	if bomb.Len() > 4<<20 {
		t.Fatalf("bomb is %d bytes; the test wants a small one", bomb.Len())
	}
	_, err = snapshot.Load(&bomb)
	if !errors.As(err, &le) || !strings.Contains(le.Why, "larger than 256 MiB") {
		t.Errorf("gzip bomb: %v, want a size error", err)
	}
}

func TestLoadGzip(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(minimal))
	zw.Close()
	good := z.Bytes()
	s, err := snapshot.Load(bytes.NewReader(good))
	if err != nil || len(s.Samples) != 1 {
		t.Fatalf("gzip snapshot: %v", err)
	}
	bad := []struct {
		name string
		in   []byte
		why  string
	}{
		{"bad header", []byte{0x1f, 0x8b, 0xff, 0, 0, 0, 0, 0, 0, 0}, "bad gzip"},
		{"truncated", good[:len(good)/2], "bad gzip"},
		{"corrupt body", append(append([]byte{}, good[:12]...), bytes.Repeat([]byte{0xff}, 40)...), "bad gzip"},
	}
	for _, tc := range bad {
		_, err := snapshot.Load(bytes.NewReader(tc.in))
		var le *snapshot.LoadError
		if !errors.As(err, &le) || !strings.Contains(le.Why, tc.why) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.why)
		}
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestLoadReadError(t *testing.T) {
	_, err := snapshot.Load(failingReader{})
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("read error: %v", err)
	}
}

func TestSecondSample(t *testing.T) {
	in := strings.Replace(minimal, "# a note", "interval: 1.5s", 1) + "-- next:/sys/fs/cgroup/a/cpu.weight --\n200\n"
	s, err := snapshot.Load(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Samples) != 2 || s.Samples[1].Time.Sub(s.Samples[0].Time) != 1500*time.Millisecond {
		t.Fatalf("samples %+v", s.Samples)
	}
	next := s.Samples[1].FS
	if b, _ := next.ReadFile("/sys/fs/cgroup/a/cpu.weight"); string(b) != "200\n" {
		t.Errorf("second sample cpu.weight = %q, want 200", b)
	}
	// Files the second sample did not change come from the first.
	if b, _ := next.ReadFile("/sys/devices/system/cpu/online"); string(b) != "0-3\n" {
		t.Errorf("second sample CPU list = %q", b)
	}
	if b, _ := s.Samples[0].FS.ReadFile("/sys/fs/cgroup/a/cpu.weight"); string(b) != "100\n" {
		t.Errorf("first sample changed: %q", b)
	}
	if d, _ := next.ReadDirs("/sys/fs/cgroup"); !slices.Equal(d, []string{"a", "empty"}) {
		t.Errorf("second sample dirs %q", d)
	}
}

// mapFS is a node as a map of host paths to contents; directories are
// implied by the files and listed in dirs when empty.
type mapFS struct {
	files map[string]string
	dirs  map[string]bool
}

func (m *mapFS) ReadFile(p string) ([]byte, error) {
	if s, ok := m.files[p]; ok {
		return []byte(s), nil
	}
	return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
}

func (m *mapFS) ReadDirs(p string) ([]string, error) {
	found := m.dirs[p]
	kids := map[string]bool{}
	add := func(f string) {
		if f == p {
			found = true
		}
		if rest, ok := strings.CutPrefix(f, p+"/"); ok {
			found = true
			kids[strings.Split(rest, "/")[0]] = true
		}
	}
	for f := range m.files {
		add(path.Dir(f))
	}
	for d := range m.dirs {
		add(d)
	}
	if !found {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	return slices.Sorted(func(yield func(string) bool) {
		for k := range kids {
			if !yield(k) {
				return
			}
		}
	}), nil
}

// v1Node builds a cgroup v1 node (this machine's mount shape: cpu and
// cpuacct separate) with a Burstable pod, a BestEffort pod whose container
// sits at the root, and usage that grows by use between two samples.
func v1Node(usage func(base uint64) uint64) *mapFS {
	const (
		uid = "0f3c4d2a-8b1e-4f6a-9c7d-2e5b8a1f0c3d"
		cid = "6a3f1e9b0c2d4e5f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f"
	)
	m := &mapFS{files: map[string]string{
		"/proc/self/mountinfo": "22 27 0:21 / /proc rw,relatime - proc proc rw\n" +
			"32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
			"33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n" +
			"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
			"39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n" +
			"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
		"/sys/devices/system/cpu/online": "0-1\n",
	}, dirs: map[string]bool{"/sys/fs/cgroup/cpu/kubepods/besteffort/empty": true}}
	cg := func(p string, shares, usageNs uint64, procs string) {
		m.files["/sys/fs/cgroup/cpu"+p+"/cpu.shares"] = itoa(shares) + "\n"
		m.files["/sys/fs/cgroup/cpu"+p+"/cpu.cfs_quota_us"] = "-1\n"
		m.files["/sys/fs/cgroup/cpu"+p+"/cpu.cfs_period_us"] = "100000\n"
		m.files["/sys/fs/cgroup/cpu"+p+"/cgroup.procs"] = procs
		m.files["/sys/fs/cgroup/cpu"+p+"/tasks"] = procs
		m.files["/sys/fs/cgroup/cpuacct"+p+"/cpuacct.usage"] = itoa(usage(usageNs)) + "\n"
		m.files["/sys/fs/cgroup/memory"+p+"/memory.usage_in_bytes"] = "1048576\n"
		m.files["/sys/fs/cgroup/memory"+p+"/memory.limit_in_bytes"] = "9223372036854771712\n"
		m.files["/sys/fs/cgroup/memory"+p+"/memory.stat"] = "total_inactive_file 4096\ntotal_rss 8192\n"
	}
	cg("", 1024, 5e12, "1\n")
	cg("/kubepods", 2048, 1e12, "")
	cg("/kubepods/burstable", 1024, 5e11, "")
	cg("/kubepods/burstable/pod"+uid, 512, 5e11, "")
	cg("/kubepods/burstable/pod"+uid+"/"+cid, 512, 5e11, "4127\n")
	cg("/kubepods/besteffort", 2, 0, "")
	cg("/kubepods/besteffort/pod"+uid[:35]+"1", 2, 0, "")
	cg("/kubepods-besteffort-pod"+strings.ReplaceAll(uid[:35]+"1", "-", "_")+".slice:cri-containerd:"+cid[:63]+"1", 1024, 2e11, "8001\n8002\n")
	cg("/system.slice", 1024, 3e12, "")
	return m
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// scan opens fsys and scans it (two samples when second is not nil).
func scan(t *testing.T, first, second cgroupfs.FS, t0, t1 time.Time) *inventory.Node {
	t.Helper()
	sc, err := inventory.Open(first)
	if err != nil {
		t.Fatal(err)
	}
	n, err := sc.Scan(t0)
	if err != nil {
		t.Fatal(err)
	}
	if second == nil {
		return n
	}
	sc2, err := inventory.Open(second)
	if err != nil {
		t.Fatal(err)
	}
	n2, err := sc2.Scan(t1)
	if err != nil {
		t.Fatal(err)
	}
	inventory.Rate(n, n2)
	return n2
}

// view is everything a scan found, for comparing two scans: the inspect
// JSON plus every cgroup's identity, figures and guarantee.
func view(t *testing.T, n *inventory.Node) string {
	t.Helper()
	type cg struct {
		Path       string
		Identity   any
		Stats      any
		Guaranteed float64
		Usage      *float64
	}
	var all []cg
	n.Root.Walk(func(c *inventory.Cgroup) {
		all = append(all, cg{c.Path, c.Identity, c.Stats, c.GuaranteedCores, c.UsageCores})
	})
	b, err := json.MarshalIndent(struct {
		Report  inspect.Report
		Cgroups []cg
	}{inspect.Build(n), all}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRoundTripMapFS(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	t1 := t0.Add(2 * time.Second)
	before := v1Node(func(b uint64) uint64 { return b })
	after := v1Node(func(b uint64) uint64 { return b + b/1000 })
	direct := scan(t, before, after, t0, t1)
	if len(direct.Pods) != 2 {
		t.Fatalf("the fixture node has %d pods, want 2", len(direct.Pods))
	}

	r1, r2 := snapshot.NewRecorder(before), snapshot.NewRecorder(after)
	scan(t, r1, r2, t0, t1)
	var buf bytes.Buffer
	if err := snapshot.Write(&buf, r1, r2, t0, t1.Sub(t0), []string{"round trip\nwith a newline"}); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	if strings.Contains(text, " - proc proc ") {
		t.Error("the snapshot kept a non-cgroup mount")
	}
	if !strings.Contains(text, "-- /sys/fs/cgroup/cpu/kubepods/besteffort/empty/ --") {
		t.Error("the empty cgroup directory is not in the snapshot")
	}
	if !strings.Contains(text, "# round trip with a newline\n") {
		t.Error("the note is not one header line")
	}
	s, err := snapshot.Load(&buf)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if len(s.Samples) != 2 || !s.Samples[0].Time.Equal(t0) || !s.Samples[1].Time.Equal(t1) {
		t.Fatalf("samples %+v", s.Samples)
	}
	loaded := scan(t, s.Samples[0].FS, s.Samples[1].FS, s.Samples[0].Time, s.Samples[1].Time)
	if got, want := view(t, loaded), view(t, direct); got != want {
		t.Errorf("scan of the loaded snapshot differs from the direct scan:\n--- loaded\n%s\n--- direct\n%s", got, want)
	}
	// Only changed files are in the second sample.
	if n := strings.Count(text, "-- next:"); n != 7 {
		t.Errorf("%d next: sections, want 7 (cpuacct.usage of the 7 cgroups with usage)", n)
	}
}

func TestRoundTripSeed003(t *testing.T) {
	// The embedded seed 003 snapshot is itself a map-backed FS: recording
	// a scan of it and writing it again must lose nothing a scan uses.
	raw, ok := examples.Open("seed-003-k3s-spin")
	if !ok {
		t.Fatal("no embedded seed-003-k3s-spin")
	}
	orig, err := snapshot.Load(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	a, b := orig.Samples[0], orig.Samples[1]
	direct := scan(t, a.FS, b.FS, a.Time, b.Time)
	r1, r2 := snapshot.NewRecorder(a.FS), snapshot.NewRecorder(b.FS)
	scan(t, r1, r2, a.Time, b.Time)
	var buf bytes.Buffer
	if err := snapshot.Write(&buf, r1, r2, a.Time, b.Time.Sub(a.Time), nil); err != nil {
		t.Fatal(err)
	}
	again, err := snapshot.Load(&buf)
	if err != nil {
		t.Fatal(err)
	}
	loaded := scan(t, again.Samples[0].FS, again.Samples[1].FS, again.Samples[0].Time, again.Samples[1].Time)
	if got, want := view(t, loaded), view(t, direct); got != want {
		t.Errorf("rewritten seed 003 scans differently:\n--- rewritten\n%s\n--- original\n%s", got, want)
	}
}

func TestWriteRefusesFraming(t *testing.T) {
	m := &mapFS{files: map[string]string{"/sys/fs/cgroup/x/evil": "ok\n-- /etc/shadow --\nroot\n"}}
	r := snapshot.NewRecorder(m)
	if _, err := r.ReadFile("/sys/fs/cgroup/x/evil"); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	err := snapshot.Write(&buf, r, nil, time.Now(), 0, nil)
	if err == nil || !strings.Contains(err.Error(), "/sys/fs/cgroup/x/evil") {
		t.Errorf("Write = %v, want a refusal naming the file", err)
	}
}

func TestRoundTripLive(t *testing.T) {
	// Record a scan of this machine, write it, load it, scan the snapshot:
	// the same cgroups, identities and figures. First the whole host, then
	// a kubepods-shaped scratch tree with a process in a container and one
	// in a misplaced literal directory.
	realtest.Require(t)
	t.Run("host", func(t *testing.T) {
		host, err := cgroupfs.OpenHost("/")
		if err != nil {
			t.Fatal(err)
		}
		defer host.Close()
		roundTripLive(t, host, "/")
	})
	t.Run("scratch", func(t *testing.T) {
		const (
			uid = "0f3c4d2a-8b1e-4f6a-9c7d-2e5b8a1f0c3d"
			cid = "6a3f1e9b0c2d4e5f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f"
		)
		s := realtest.NewScratch(t)
		pod := "kubepods/burstable/pod" + uid
		literal := "kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice:cri-containerd:" + cid[:63] + "0"
		for _, d := range []string{"kubepods", "kubepods/burstable", pod, pod + "/" + cid, literal} {
			s.Mkdir(d)
		}
		s.Start(pod+"/"+cid, "sleep", "600")
		s.Start(literal, "sleep", "600")
		n := roundTripLive(t, s.Host, s.Name)
		p := n.Pod(uid)
		if p == nil || len(p.Containers) != 2 || n.KubeRoot == nil {
			t.Fatalf("the scratch pod was not found whole: %+v", p)
		}
	})
}

// roundTripLive scans base on fsys through a Recorder, writes and loads
// the snapshot, rescans it and compares. It returns the snapshot's scan.
func roundTripLive(t *testing.T, fsys cgroupfs.FS, base string) *inventory.Node {
	t.Helper()
	rec := snapshot.NewRecorder(fsys)
	now := time.Now()
	scanBase := func(f cgroupfs.FS, at time.Time) *inventory.Node {
		sc, err := inventory.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc.Base = base
		n, err := sc.Scan(at)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	live := scanBase(rec, now)
	var buf bytes.Buffer
	if err := snapshot.Write(&buf, rec, nil, now, 0, []string{"live round trip"}); err != nil {
		t.Fatal(err)
	}
	size := buf.Len()
	s, err := snapshot.Load(&buf)
	if err != nil {
		t.Fatal(err)
	}
	again := scanBase(s.Samples[0].FS, s.Samples[0].Time)

	// Cgroups that vanished during the live scan (other tests' scratch
	// cgroups come and go) are not in the snapshot, by design.
	type row struct {
		Identity   any
		Stats      any
		Guaranteed float64
	}
	rows := func(n *inventory.Node, skipGone bool) map[string]string {
		out := map[string]string{}
		n.Root.Walk(func(c *inventory.Cgroup) {
			if skipGone && c.Stats.Gone {
				return
			}
			b, _ := json.Marshal(row{c.Identity, c.Stats, c.GuaranteedCores})
			out[c.Path] = string(b)
		})
		return out
	}
	want, got := rows(live, true), rows(again, false)
	for p, w := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("%s: in the live scan, not in the snapshot's", p)
		} else if g != w {
			t.Errorf("%s:\nsnapshot %s\n    live %s", p, g, w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: in the snapshot's scan only", p)
		}
	}
	if len(live.Pods) != len(again.Pods) || live.Version != again.Version || live.CPUs != again.CPUs {
		t.Errorf("pods %d vs %d, version %s vs %s, CPUs %d vs %d", len(live.Pods), len(again.Pods), live.Version, again.Version, live.CPUs, again.CPUs)
	}
	t.Logf("%s: %d cgroups, snapshot %d bytes", base, len(want), size)
	return again
}

func FuzzLoad(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte(strings.Replace(minimal, "# a note", "interval: 1s", 1) + "-- next:/sys/fs/cgroup/a/cpu.weight --\n200\n"))
	f.Add([]byte("cgwarden snapshot v1\n-- /proc/self/mountinfo --\n1 2 3 4 /x 6 - cgroup2 c rw\n-- /x/../y --\n"))
	if raw, ok := examples.Open("seed-003-k3s-spin"); ok {
		f.Add(raw)
	}
	if sealed, err := snapshot.Reseal([]byte(minimal)); err == nil {
		f.Add(sealed)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(minimal))
	zw.Close()
	f.Add(z.Bytes())
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := snapshot.Load(bytes.NewReader(in))
		if err != nil {
			if s != nil {
				t.Fatal("snapshot beside an error")
			}
			return
		}
		// A loaded snapshot must be scannable without panics (errors are
		// fine: it may lack a CPU list or a hierarchy).
		for _, smp := range s.Samples {
			sc, err := inventory.Open(smp.FS)
			if err != nil {
				continue
			}
			if n, err := sc.Scan(smp.Time); err == nil {
				var buf bytes.Buffer
				if err := json.NewEncoder(&buf).Encode(inspect.NewReport(n, nil)); err != nil {
					t.Fatalf("inspect JSON of a loaded snapshot: %v", err)
				}
				if err := inspect.WriteText(&buf, n, inspect.TextOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// TestRoundTripCgroupsComeAndGo: a cgroup removed and one made between the
// two samples replay as they were live — the removed one absent from the
// second sample's scan (with all its files), the new one present.
func TestRoundTripCgroupsComeAndGo(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 := t0.Add(time.Second)
	before := v1Node(func(b uint64) uint64 { return b })
	after := v1Node(func(b uint64) uint64 { return b + 1e6 })
	gone := "/system.slice"
	for f := range after.files {
		for _, mnt := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/memory"} {
			if strings.HasPrefix(f, mnt+gone+"/") {
				delete(after.files, f)
			}
		}
	}
	made := "/kubepods/burstable/new"
	after.files["/sys/fs/cgroup/cpu"+made+"/cpu.shares"] = "1024\n"
	after.files["/sys/fs/cgroup/cpuacct"+made+"/cpuacct.usage"] = "7\n"
	after.dirs["/sys/fs/cgroup/cpu"+made+"/empty-child"] = true

	direct := scan(t, before, after, t0, t1)
	r1, r2 := snapshot.NewRecorder(before), snapshot.NewRecorder(after)
	scan(t, r1, r2, t0, t1)
	var buf bytes.Buffer
	if err := snapshot.Write(&buf, r1, r2, t0, t1.Sub(t0), nil); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{
		"-- next-gone:/sys/fs/cgroup/cpu" + gone + "/ --",
		"-- next:/sys/fs/cgroup/cpu" + made + "/empty-child/ --",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("snapshot lacks %q", want)
		}
	}
	s, err := snapshot.Load(&buf)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	loaded := scan(t, s.Samples[0].FS, s.Samples[1].FS, s.Samples[0].Time, s.Samples[1].Time)
	if loaded.Find(gone) != nil || loaded.Find(made) == nil || loaded.Find(made+"/empty-child") == nil {
		t.Errorf("second sample: removed cgroup found %v, new one found %v", loaded.Find(gone) != nil, loaded.Find(made) != nil)
	}
	if got, want := view(t, loaded), view(t, direct); got != want {
		t.Errorf("scan of the loaded snapshot differs from the direct scan:\n--- loaded\n%s\n--- direct\n%s", got, want)
	}
	// A file of the removed cgroup is gone from the second sample too.
	if _, err := s.Samples[1].FS.ReadFile("/sys/fs/cgroup/cpu" + gone + "/cpu.shares"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("file of a removed cgroup in the second sample: %v, want ErrNotExist", err)
	}
	if _, err := s.Samples[0].FS.ReadFile("/sys/fs/cgroup/cpu" + gone + "/cpu.shares"); err != nil {
		t.Errorf("file of the removed cgroup in the first sample: %v", err)
	}
}

// denyFS makes some files of a node exist but refuse to be read.
type denyFS struct {
	*mapFS
	deny map[string]bool
}

func (d denyFS) ReadFile(p string) ([]byte, error) {
	if d.deny[p] {
		return nil, &fs.PathError{Op: "open", Path: p, Err: syscall.EACCES}
	}
	return d.mapFS.ReadFile(p)
}

// TestRoundTripUnreadableFiles: a file that exists but cannot be read on
// the node fails in the replay too (a read error, not a missing file), in
// the sample where it failed.
func TestRoundTripUnreadableFiles(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 := t0.Add(time.Second)
	both := "/sys/fs/cgroup/memory/kubepods/memory.stat"
	later := "/sys/fs/cgroup/cpu/system.slice/cpu.shares"
	before := denyFS{v1Node(func(b uint64) uint64 { return b }), map[string]bool{both: true}}
	after := denyFS{v1Node(func(b uint64) uint64 { return b + 1e6 }), map[string]bool{both: true, later: true}}
	direct := scan(t, before, after, t0, t1)
	if len(direct.Errors) != 2 {
		t.Fatalf("direct scan: %d read errors, want 2: %v", len(direct.Errors), direct.Errors)
	}
	r1, r2 := snapshot.NewRecorder(before), snapshot.NewRecorder(after)
	scan(t, r1, r2, t0, t1)
	var buf bytes.Buffer
	if err := snapshot.Write(&buf, r1, r2, t0, t1.Sub(t0), nil); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{"-- failed:" + both + " --\npermission denied\n", "-- next-failed:" + later + " --\npermission denied\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("snapshot lacks %q", want)
		}
	}
	s, err := snapshot.Load(&buf)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if _, err := s.Samples[0].FS.ReadFile(later); err != nil {
		t.Errorf("first sample: %s: %v, want it readable", later, err)
	}
	for i, p := range []string{both, later} {
		_, err := s.Samples[1].FS.ReadFile(p)
		if err == nil || errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("second sample, file %d: %v, want a permission error", i, err)
		}
	}
	loaded := scan(t, s.Samples[0].FS, s.Samples[1].FS, s.Samples[0].Time, s.Samples[1].Time)
	if len(loaded.Errors) != len(direct.Errors) {
		t.Errorf("replay: %d read errors, the node had %d", len(loaded.Errors), len(direct.Errors))
	}
	if got, want := view(t, loaded), view(t, direct); got != want {
		t.Errorf("scan of the loaded snapshot differs from the direct scan:\n--- loaded\n%s\n--- direct\n%s", got, want)
	}
}

// TestLoadTooManySections: a small file of many tiny sections is refused
// before it is parsed, with a precise error.
func TestLoadTooManySections(t *testing.T) {
	var b strings.Builder
	b.WriteString(minimal)
	for i := 0; i <= snapshot.MaxFiles; i++ {
		b.WriteString("-- /sys/fs/cgroup/a --\n")
	}
	_, err := snapshot.Load(strings.NewReader(b.String()))
	var le *snapshot.LoadError
	if !errors.As(err, &le) || !strings.Contains(le.Why, "more than") {
		t.Fatalf("%d sections: %v, want a section-count error", snapshot.MaxFiles+1, err)
	}
}
