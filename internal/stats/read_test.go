package stats

import (
	"errors"
	"io/fs"
	"path"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/mounts"
)

// mapFS is an in-memory cgroupfs.FS: files by absolute path, plus errors
// to return for some paths (a file that exists but cannot be read).
type mapFS struct {
	files map[string]string
	errs  map[string]error
}

var _ cgroupfs.FS = mapFS{}

func (m mapFS) ReadFile(p string) ([]byte, error) {
	if err, ok := m.errs[p]; ok {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	if s, ok := m.files[p]; ok {
		return []byte(s), nil
	}
	return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
}

func (m mapFS) ReadDirs(p string) ([]string, error) {
	seen := map[string]bool{}
	for f := range m.files {
		if rest, ok := strings.CutPrefix(path.Dir(f), p+"/"); ok {
			seen[strings.Split(rest, "/")[0]] = true
		}
	}
	return slices.Sorted(func(yield func(string) bool) {
		for d := range seen {
			if !yield(d) {
				return
			}
		}
	}), nil
}

// fixture loads a txtar of host files.
func fixture(t *testing.T, name string) mapFS {
	t.Helper()
	ar, err := txtar.ParseFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	m := mapFS{files: map[string]string{}, errs: map[string]error{}}
	for _, f := range ar.Files {
		m.files[f.Name] = string(f.Data)
	}
	return m
}

var (
	// This machine: v1 controllers on separate mounts.
	placesV1 = mounts.Places{CPU: "/sys/fs/cgroup/cpu", CPUAcct: "/sys/fs/cgroup/cpuacct", Memory: "/sys/fs/cgroup/memory", Pids: "/sys/fs/cgroup/pids"}
	placesV2 = mounts.Places{V2: true, Unified: "/sys/fs/cgroup"}
)

func u64(v uint64) *uint64 { return &v }
func i64(v int64) *int64   { return &v }

func eqU(a, b *uint64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
func eqI(a, b *int64) bool  { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
func eqN(a, b *int) bool    { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func show[T any](p *T) any {
	if p == nil {
		return "nil"
	}
	return *p
}

// checkStats compares every field, nil-aware.
func checkStats(t *testing.T, got, want Stats) {
	t.Helper()
	us := []struct {
		name      string
		got, want *uint64
	}{
		{"CPU.Weight", got.CPU.Weight, want.CPU.Weight},
		{"CPU.PeriodUs", got.CPU.PeriodUs, want.CPU.PeriodUs},
		{"CPU.UsageNs", got.CPU.UsageNs, want.CPU.UsageNs},
		{"CPU.UserNs", got.CPU.UserNs, want.CPU.UserNs},
		{"CPU.SystemNs", got.CPU.SystemNs, want.CPU.SystemNs},
		{"CPU.Periods", got.CPU.Periods, want.CPU.Periods},
		{"CPU.Throttled", got.CPU.Throttled, want.CPU.Throttled},
		{"CPU.ThrottledNs", got.CPU.ThrottledNs, want.CPU.ThrottledNs},
		{"Memory.UsageBytes", got.Memory.UsageBytes, want.Memory.UsageBytes},
		{"Memory.WorkingSetBytes", got.Memory.WorkingSetBytes, want.Memory.WorkingSetBytes},
		{"Memory.RSSBytes", got.Memory.RSSBytes, want.Memory.RSSBytes},
		{"Memory.InactiveFileBytes", got.Memory.InactiveFileBytes, want.Memory.InactiveFileBytes},
		{"Memory.PageFaults", got.Memory.PageFaults, want.Memory.PageFaults},
		{"Memory.MajorPageFaults", got.Memory.MajorPageFaults, want.Memory.MajorPageFaults},
		{"Pids.Current", got.Pids.Current, want.Pids.Current},
	}
	for _, f := range us {
		if !eqU(f.got, f.want) {
			t.Errorf("%s = %v, want %v", f.name, show(f.got), show(f.want))
		}
	}
	is := []struct {
		name      string
		got, want *int64
	}{
		{"CPU.QuotaUs", got.CPU.QuotaUs, want.CPU.QuotaUs},
		{"CPU.Idle", got.CPU.Idle, want.CPU.Idle},
		{"Memory.LimitBytes", got.Memory.LimitBytes, want.Memory.LimitBytes},
		{"Pids.Max", got.Pids.Max, want.Pids.Max},
	}
	for _, f := range is {
		if !eqI(f.got, f.want) {
			t.Errorf("%s = %v, want %v", f.name, show(f.got), show(f.want))
		}
	}
	if !eqN(got.Procs, want.Procs) {
		t.Errorf("Procs = %v, want %v", show(got.Procs), show(want.Procs))
	}
	if !eqN(got.Threads, want.Threads) {
		t.Errorf("Threads = %v, want %v", show(got.Threads), show(want.Threads))
	}
	if (got.Pressure == nil) != (want.Pressure == nil) {
		t.Errorf("Pressure = %+v, want %+v", got.Pressure, want.Pressure)
	} else if got.Pressure != nil {
		for _, p := range []struct {
			name      string
			got, want *PSI
		}{{"cpu", got.Pressure.CPU, want.Pressure.CPU}, {"memory", got.Pressure.Memory, want.Pressure.Memory}, {"io", got.Pressure.IO, want.Pressure.IO}} {
			if (p.got == nil) != (p.want == nil) || (p.got != nil && (p.got.Some != p.want.Some || (p.got.Full == nil) != (p.want.Full == nil) || (p.got.Full != nil && *p.got.Full != *p.want.Full))) {
				t.Errorf("Pressure.%s = %+v, want %+v", p.name, p.got, p.want)
			}
		}
	}
	if got.Gone != want.Gone {
		t.Errorf("Gone = %v, want %v", got.Gone, want.Gone)
	}
}

func TestReadV1Root(t *testing.T) {
	// The root cgroup of this development VM, copied into the fixture.
	r := Reader{FS: fixture(t, "v1-root.txtar"), Places: placesV1}
	s, errs := r.Read("/", true)
	if len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	n5, n7 := 5, 7
	checkStats(t, s, Stats{
		CPU: CPU{
			Weight: u64(1024), QuotaUs: i64(Unlimited), PeriodUs: u64(100000), Idle: i64(0),
			// v1's user/system split (cpuacct.stat) is not read.
			UsageNs: u64(721581302290),
			Periods: u64(0), Throttled: u64(0), ThrottledNs: u64(0),
		},
		Memory: Memory{
			UsageBytes: u64(1142415360),
			// 9223372036854771712 is no limit.
			LimitBytes:        i64(Unlimited),
			InactiveFileBytes: u64(299749376),
			WorkingSetBytes:   u64(1142415360 - 299749376),
			RSSBytes:          u64(16953344),
			PageFaults:        u64(20959709), MajorPageFaults: u64(2319),
		},
		// The pids root has neither pids.current nor pids.max: unknown.
		Procs: &n5, Threads: &n7,
	})
	// Threads are read only when asked for.
	s, _ = r.Read("/", false)
	if s.Threads != nil {
		t.Errorf("Threads = %d without withThreads", *s.Threads)
	}
}

func TestReadV1CoMounted(t *testing.T) {
	// cpu and cpuacct co-mounted (Amazon Linux 2, seed 000): the same
	// directory holds both controllers' files.
	const dir = "/sys/fs/cgroup/cpu,cpuacct/kubepods/besteffort"
	fsys := mapFS{files: map[string]string{
		dir + "/cpu.shares":       "2\n",
		dir + "/cpu.cfs_quota_us": "-1\n",
		dir + "/cpuacct.usage":    "8118233000\n",
		dir + "/cpuacct.stat":     "user 700\nsystem 100\n",
		dir + "/cgroup.procs":     "",
		"/sys/fs/cgroup/memory/kubepods/besteffort/memory.limit_in_bytes": "9223372036854771712\n",
		"/sys/fs/cgroup/pids/kubepods/besteffort/pids.max":                "max\n",
		"/sys/fs/cgroup/pids/kubepods/besteffort/pids.current":            "14\n",
	}}
	tab, err := mounts.Parse("30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n" +
		"32 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
		"38 25 0:34 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n")
	if err != nil {
		t.Fatal(err)
	}
	places, err := tab.Places()
	if err != nil {
		t.Fatal(err)
	}
	s, errs := Reader{FS: fsys, Places: places}.Read("/kubepods/besteffort", false)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	n0 := 0
	checkStats(t, s, Stats{
		CPU:    CPU{Weight: u64(2), QuotaUs: i64(Unlimited), UsageNs: u64(8118233000)},
		Memory: Memory{LimitBytes: i64(Unlimited)},
		Pids:   Pids{Current: u64(14), Max: i64(Unlimited)},
		Procs:  &n0,
	})
}

func TestReadV2(t *testing.T) {
	r := Reader{FS: fixture(t, "v2-container.txtar"), Places: placesV2}
	s, errs := r.Read("/pod/ctr", true)
	if len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	n2 := 2
	checkStats(t, s, Stats{
		CPU: CPU{
			Weight: u64(39), QuotaUs: i64(150000), PeriodUs: u64(100000), Idle: i64(0),
			// v2 cpu.stat is in µs.
			UsageNs: u64(713442268_000), UserNs: u64(544530563_000), SystemNs: u64(168911704_000),
			Periods: u64(4210), Throttled: u64(12), ThrottledNs: u64(88123_000),
		},
		Memory: Memory{
			UsageBytes: u64(52334592), LimitBytes: i64(268435456),
			InactiveFileBytes: u64(15728640), WorkingSetBytes: u64(52334592 - 15728640),
			RSSBytes: u64(31457280), PageFaults: u64(18734), MajorPageFaults: u64(57),
		},
		Pids: Pids{Current: u64(7), Max: i64(Unlimited)},
		Pressure: &Pressure{
			CPU:    &PSI{Some: PSILine{27.33, 45.62, 27.23, 149735342}, Full: &PSILine{}},
			Memory: &PSI{Some: PSILine{}, Full: &PSILine{}},
			IO:     &PSI{Some: PSILine{0, 0.06, 0.18, 4279576}, Full: &PSILine{0, 0.01, 0.09, 3171374}},
		},
		// v2 has no tasks file: Threads stays unknown even when asked.
		Procs: &n2,
	})
}

func TestReadMissingFiles(t *testing.T) {
	// A cgroup with only cgroup.procs: every figure unknown, no error,
	// not gone. v2 without PSI (CONFIG_PSI=n) has no Pressure at all.
	for _, tc := range []struct {
		name   string
		places mounts.Places
		procs  string
	}{
		{"v1", placesV1, "/sys/fs/cgroup/cpu/x/cgroup.procs"},
		{"v2", placesV2, "/sys/fs/cgroup/x/cgroup.procs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := mapFS{files: map[string]string{tc.procs: "12\n"}}
			s, errs := Reader{FS: fsys, Places: tc.places}.Read("/x", true)
			if len(errs) != 0 {
				t.Fatal(errs)
			}
			n1 := 1
			checkStats(t, s, Stats{Procs: &n1})
		})
	}
	// A v1 controller that is not mounted at all is unknown too.
	fsys := mapFS{files: map[string]string{"/sys/fs/cgroup/cpu/x/cpu.shares": "512\n"}}
	s, errs := Reader{FS: fsys, Places: mounts.Places{CPU: "/sys/fs/cgroup/cpu"}}.Read("/x", false)
	if len(errs) != 0 || s.CPU.Weight == nil || *s.CPU.Weight != 512 || s.CPU.UsageNs != nil || s.Memory.UsageBytes != nil {
		t.Errorf("cpu only: %+v, %v", s, errs)
	}
}

func TestReadGone(t *testing.T) {
	for _, p := range []mounts.Places{placesV1, placesV2} {
		s, errs := Reader{FS: mapFS{}, Places: p}.Read("/vanished", true)
		if !s.Gone || len(errs) != 0 {
			t.Errorf("v2=%v: Gone = %v, errs %v; want gone without errors", p.V2, s.Gone, errs)
		}
	}
	// A cgroup whose files all exist but cannot be read is there, with
	// unknown figures and an error per file: not gone.
	denied := mapFS{errs: map[string]error{}}
	for _, f := range []string{"cpu.weight", "cpu.max", "cpu.stat", "memory.current", "memory.max", "memory.stat", "pids.current", "pids.max", "cgroup.procs"} {
		denied.errs["/sys/fs/cgroup/x/"+f] = syscall.EACCES
	}
	if s, errs := (Reader{FS: denied, Places: placesV2}).Read("/x", false); s.Gone || len(errs) != 9 || s.CPU.Weight != nil {
		t.Errorf("unreadable cgroup: Gone = %v, %d errors, weight %v; want there, 9 errors, weight unknown", s.Gone, len(errs), s.CPU.Weight)
	}
	// One readable file is enough to be there.
	s, _ := Reader{FS: mapFS{files: map[string]string{"/sys/fs/cgroup/x/cpu.weight": "100"}}, Places: placesV2}.Read("/x", false)
	if s.Gone {
		t.Error("a cgroup with a cpu.weight is not gone")
	}
}

func TestReadMalformed(t *testing.T) {
	// Each case breaks one file; that field (and only the fields that file
	// feeds) is nil, a *FileError names the file, the rest is read.
	tests := []struct {
		name    string
		places  mounts.Places
		fixture string
		file    string
		content string
		unknown func(Stats) bool // the broken fields are nil
		kept    func(Stats) bool // a field from another file is still read
	}{
		{"v1 cpu.shares", placesV1, "v1-root.txtar", "/sys/fs/cgroup/cpu/cpu.shares", "lots\n",
			func(s Stats) bool { return s.CPU.Weight == nil },
			func(s Stats) bool { return s.CPU.UsageNs != nil && s.Memory.WorkingSetBytes != nil }},
		{"v1 quota", placesV1, "v1-root.txtar", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "none\n",
			func(s Stats) bool { return s.CPU.QuotaUs == nil },
			func(s Stats) bool { return s.CPU.PeriodUs != nil }},
		{"v1 memory.stat", placesV1, "v1-root.txtar", "/sys/fs/cgroup/memory/memory.stat", "total_inactive_file lots\n",
			func(s Stats) bool { return s.Memory.InactiveFileBytes == nil && s.Memory.WorkingSetBytes == nil },
			func(s Stats) bool { return s.Memory.UsageBytes != nil && s.Memory.LimitBytes != nil }},
		{"v1 memory limit", placesV1, "v1-root.txtar", "/sys/fs/cgroup/memory/memory.limit_in_bytes", "-1\n",
			func(s Stats) bool { return s.Memory.LimitBytes == nil },
			func(s Stats) bool { return s.Memory.UsageBytes != nil }},
		{"v1 cpu.stat", placesV1, "v1-root.txtar", "/sys/fs/cgroup/cpu/cpu.stat", "nr_periods\n",
			func(s Stats) bool { return s.CPU.Periods == nil },
			func(s Stats) bool { return s.CPU.Weight != nil }},
		{"v2 cpu.max", placesV2, "v2-container.txtar", "/sys/fs/cgroup/pod/ctr/cpu.max", "150000\n",
			func(s Stats) bool { return s.CPU.QuotaUs == nil && s.CPU.PeriodUs == nil },
			func(s Stats) bool { return s.CPU.Weight != nil }},
		{"v2 cpu.stat overflow", placesV2, "v2-container.txtar", "/sys/fs/cgroup/pod/ctr/cpu.stat", "usage_usec 18446744073709551615\n",
			func(s Stats) bool { return s.CPU.UsageNs == nil },
			func(s Stats) bool { return s.CPU.QuotaUs != nil }},
		{"v2 memory.max", placesV2, "v2-container.txtar", "/sys/fs/cgroup/pod/ctr/memory.max", "-1\n",
			func(s Stats) bool { return s.Memory.LimitBytes == nil },
			func(s Stats) bool { return s.Memory.WorkingSetBytes != nil }},
		{"v2 pids.max", placesV2, "v2-container.txtar", "/sys/fs/cgroup/pod/ctr/pids.max", "maximum\n",
			func(s Stats) bool { return s.Pids.Max == nil },
			func(s Stats) bool { return s.Pids.Current != nil }},
		{"v2 cpu.pressure", placesV2, "v2-container.txtar", "/sys/fs/cgroup/pod/ctr/cpu.pressure", "some\n",
			func(s Stats) bool { return s.Pressure != nil && s.Pressure.CPU == nil },
			func(s Stats) bool { return s.Pressure != nil && s.Pressure.IO != nil }},
		{"v2 cpu.idle", placesV2, "v2-container.txtar", "/sys/fs/cgroup/pod/ctr/cpu.idle", "yes\n",
			func(s Stats) bool { return s.CPU.Idle == nil },
			func(s Stats) bool { return s.CPU.Weight != nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fixture(t, tc.fixture)
			if _, ok := fsys.files[tc.file]; !ok {
				t.Fatalf("fixture has no %s", tc.file)
			}
			fsys.files[tc.file] = tc.content
			cg := "/" // the v1 fixture is the root cgroup
			if tc.places.V2 {
				cg = "/pod/ctr"
			}
			s, errs := Reader{FS: fsys, Places: tc.places}.Read(cg, true)
			if len(errs) != 1 {
				t.Fatalf("errors %v, want exactly one", errs)
			}
			var fe *FileError
			if !errors.As(errs[0], &fe) || fe.Path != tc.file || !errors.Is(errs[0], ErrSyntax) {
				t.Errorf("error %v: want a *FileError for %s wrapping ErrSyntax", errs[0], tc.file)
			}
			if !tc.unknown(s) {
				t.Errorf("the field fed by %s is not nil: %+v", tc.file, s)
			}
			if !tc.kept(s) {
				t.Errorf("fields from other files were lost: %+v", s)
			}
			if s.Gone {
				t.Error("Gone set")
			}
		})
	}
}

func TestReadUnreadable(t *testing.T) {
	// A file that exists but cannot be read (EACCES, EIO) is an error, not
	// a missing file.
	fsys := fixture(t, "v1-root.txtar")
	fsys.errs["/sys/fs/cgroup/memory/memory.usage_in_bytes"] = syscall.EACCES
	s, errs := Reader{FS: fsys, Places: placesV1}.Read("/", false)
	if len(errs) != 1 || !errors.Is(errs[0], syscall.EACCES) {
		t.Fatalf("errors %v, want one EACCES", errs)
	}
	var fe *FileError
	if !errors.As(errs[0], &fe) || fe.Path != "/sys/fs/cgroup/memory/memory.usage_in_bytes" {
		t.Errorf("error %v does not name the file", errs[0])
	}
	if s.Memory.UsageBytes != nil || s.Memory.WorkingSetBytes != nil {
		t.Errorf("usage %v, working set %v: want unknown", show(s.Memory.UsageBytes), show(s.Memory.WorkingSetBytes))
	}
}

func TestWorkingSet(t *testing.T) {
	tests := []struct {
		name            string
		usage, inactive *uint64
		want            *uint64
	}{
		{"usage minus inactive", u64(1000), u64(300), u64(700)},
		{"floored at zero", u64(300), u64(1000), u64(0)},
		{"equal", u64(5), u64(5), u64(0)},
		{"usage unknown", nil, u64(5), nil},
		{"inactive unknown", u64(5), nil, nil},
	}
	for _, tc := range tests {
		m := Memory{UsageBytes: tc.usage, InactiveFileBytes: tc.inactive}
		workingSet(&m)
		if !eqU(m.WorkingSetBytes, tc.want) {
			t.Errorf("%s: working set %v, want %v", tc.name, show(m.WorkingSetBytes), show(tc.want))
		}
	}
	// Through the reader, v1: usage below inactive_file (the two are read
	// at different instants) gives 0, not a wrapped-around huge number.
	fsys := mapFS{files: map[string]string{
		"/sys/fs/cgroup/memory/m/memory.usage_in_bytes": "4096\n",
		"/sys/fs/cgroup/memory/m/memory.stat":           "inactive_file 1\ntotal_inactive_file 8192\n",
	}}
	s, errs := Reader{FS: fsys, Places: placesV1}.Read("/m", false)
	if len(errs) != 0 || !eqU(s.Memory.WorkingSetBytes, u64(0)) || !eqU(s.Memory.InactiveFileBytes, u64(8192)) {
		t.Errorf("working set %v (inactive %v), errs %v; want 0 from total_inactive_file 8192", show(s.Memory.WorkingSetBytes), show(s.Memory.InactiveFileBytes), errs)
	}
}

func TestReadV1QuotaLimits(t *testing.T) {
	tests := []struct {
		quota string
		want  int64
	}{
		{"-1\n", Unlimited},
		{"50000\n", 50000},
		{"-5\n", Unlimited}, // any negative value means none to the kernel
	}
	for _, tc := range tests {
		fsys := mapFS{files: map[string]string{"/sys/fs/cgroup/cpu/q/cpu.cfs_quota_us": tc.quota}}
		s, errs := Reader{FS: fsys, Places: placesV1}.Read("/q", false)
		if len(errs) != 0 || !eqI(s.CPU.QuotaUs, i64(tc.want)) {
			t.Errorf("cfs_quota_us %q: QuotaUs %v, errs %v; want %d", tc.quota, show(s.CPU.QuotaUs), errs, tc.want)
		}
	}
}

func TestPlacesFor(t *testing.T) {
	tests := []struct {
		name, mountinfo string
		want            mounts.Places
		err             string
	}{
		{"v2", "35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", placesV2, ""},
		{"hybrid uses v1", "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n" +
			"33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n" +
			"35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
			"39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n" +
			"41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n", placesV1, ""},
		{"v1 without cpu", "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", mounts.Places{}, "without a cpu hierarchy"},
		{"nothing", "22 27 0:21 / /proc rw - proc proc rw\n", mounts.Places{}, "no cgroup hierarchy"},
	}
	for _, tc := range tests {
		tab, err := mounts.Parse(tc.mountinfo)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tab.Places()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}
