package stats

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"slices"
	"strings"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/mounts"
)

// FileError is a file that could not be read or parsed; the field it feeds
// stays unknown.
type FileError struct {
	Path string
	Err  error
}

func (e *FileError) Error() string { return fmt.Sprintf("%s: %v", e.Path, e.Err) }
func (e *FileError) Unwrap() error { return e.Err }

// Reader reads the Stats of cgroups through an FS.
type Reader struct {
	FS     cgroupfs.FS
	Places mounts.Places
	// Counters, when set, reads the files whose content changes by
	// itself (usage, memory.stat, pids.current, cgroup.procs, ...): a
	// steady-state scan keeps them open (cgroupfs.Kept). FS reads the
	// rest, and everything when Counters is nil.
	Counters cgroupfs.FS
	// SkipProcs leaves Stats.Procs unknown (nil) instead of reading
	// cgroup.procs, for a caller that needs the count of only a few
	// cgroups and reads those with ReadProcs (inventory.Scanner's
	// ProcsWhereUsed). It also leaves Stats.Pids.Current unknown where
	// no v1 thread list is read (withThreads false): a count of tasks
	// serves only to spare the lists (noTasks), and nothing else reads
	// it. A cgroup none of whose other files was found still has its
	// process list read, so that Gone means what it means without
	// SkipProcs.
	SkipProcs bool
}

// reading accumulates one cgroup's read.
type reading struct {
	r      Reader
	cgroup string
	errs   []error
	found  int // files read successfully
	// counting is set while counter files are read (see Reader.Counters).
	counting bool
}

func (x *reading) file(mount, name string) (string, bool) {
	if mount == "" {
		return "", false // controller not mounted: unknown, not an error
	}
	fsys, counters := x.r.FS, x.counting && x.r.Counters != nil
	if counters {
		fsys = x.r.Counters
	}
	var t string
	var err error
	if pr, ok := fsys.(cgroupfs.PartsReader); ok && counters {
		t, err = pr.ReadParts(mount, x.cgroup, name) // no path joined
	} else {
		var b []byte
		b, err = fsys.ReadFile(filePath(mount, x.cgroup, name))
		t = string(b)
	}
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			x.errs = append(x.errs, &FileError{filePath(mount, x.cgroup, name), err})
		}
		return "", false
	}
	x.found++
	return t, true
}

// filePath is path.Join(mount, cgroup, name). The common case (a clean
// mount point, a clean absolute cgroup path, a plain file name) is one
// concatenation: path.Join would allocate three or four times for the
// "//" it makes and cleans, on each of the thousands of files of a scan.
func filePath(mount, cgroup, name string) string {
	if mount == "/" || !path.IsAbs(mount) || path.Clean(mount) != mount || !path.IsAbs(cgroup) || path.Clean(cgroup) != cgroup ||
		name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return path.Join(mount, cgroup, name)
	}
	if cgroup == "/" {
		return mount + "/" + name
	}
	return mount + cgroup + "/" + name
}

func (x *reading) fail(mount, name string, err error) {
	x.errs = append(x.errs, &FileError{path.Join(mount, x.cgroup, name), err})
}

// field reads and parses one file: nil when it is missing (unknown) or
// cannot be read or parsed (an error recorded).
func field[T any](x *reading, mount, name string, parse func(string) (T, error)) *T {
	if s, ok := x.file(mount, name); ok {
		v, err := parse(s)
		if err != nil {
			x.fail(mount, name, err)
			return nil
		}
		return &v
	}
	return nil
}

// Read reads the Stats of one cgroup (its path inside the hierarchy, "/"
// for the root). Missing files leave fields unknown and are not errors;
// files that exist but cannot be read or parsed are returned as
// *FileError. withThreads asks for the v1 thread count (tasks), which only
// non-leaf cgroups need.
func (r Reader) Read(cgroup string, withThreads bool) (Stats, []error) {
	return r.ReadKnown(cgroup, withThreads, nil)
}

// ReadKnown is Read that takes the cgroup's settings (see Settings) from
// known instead of reading them, when known is not nil: a steady-state
// scan reads settings only when they can have changed. A cgroup found
// gone has no settings, as with Read.
func (r Reader) ReadKnown(cgroup string, withThreads bool, known *Settings) (Stats, []error) {
	x := &reading{r: r, cgroup: cgroup}
	var s Stats
	if known == nil {
		if r.Places.V2 {
			x.settingsV2(&s)
		} else {
			x.settingsV1(&s)
		}
	}
	x.counting = true
	if r.Places.V2 {
		x.countersV2(&s)
	} else {
		x.countersV1(&s, withThreads, known != nil && known.Frozen != nil)
	}
	if x.found == 0 && len(x.errs) == 0 && r.SkipProcs {
		// Nothing else was there: the pid list says whether the cgroup
		// is (on v1 a cgroup may exist in the cpu hierarchy alone).
		x.listProcs(&s, withThreads)
	}
	// Gone only when every file was simply missing: a cgroup whose files
	// exist but cannot be read (EACCES, EIO) is there, its figures unknown.
	if x.found == 0 && len(x.errs) == 0 {
		s.Gone = true
	} else if known != nil {
		s.setSettings(*known)
	}
	return s, x.errs
}

// Settings are the figures of a cgroup that change only when someone
// writes them: its weight, CPU quota and period, idle flag, memory and pid
// limits.
type Settings struct {
	Weight     *uint64
	QuotaUs    *int64
	PeriodUs   *uint64
	Idle       *int64
	LimitBytes *int64
	PidsMax    *int64
	// Frozen holds v1's throttling counters (cpu.stat) when the quota
	// is unlimited: only the quota's period timer moves them, so they
	// stand still until the quota is written (a settings change).
	Frozen *CPU
}

// Settings returns the settings part of s.
func (s *Stats) Settings(v2 bool) Settings {
	k := Settings{Weight: s.CPU.Weight, QuotaUs: s.CPU.QuotaUs, PeriodUs: s.CPU.PeriodUs, Idle: s.CPU.Idle,
		LimitBytes: s.Memory.LimitBytes, PidsMax: s.Pids.Max}
	if !v2 && unlimited(k.QuotaUs) && s.CPU.Periods != nil {
		k.Frozen = &CPU{Periods: s.CPU.Periods, Throttled: s.CPU.Throttled, ThrottledNs: s.CPU.ThrottledNs}
	}
	return k
}

func unlimited(q *int64) bool { return q != nil && *q == Unlimited }

func (s *Stats) setSettings(k Settings) {
	s.CPU.Weight, s.CPU.QuotaUs, s.CPU.PeriodUs, s.CPU.Idle = k.Weight, k.QuotaUs, k.PeriodUs, k.Idle
	s.Memory.LimitBytes, s.Pids.Max = k.LimitBytes, k.PidsMax
	if k.Frozen != nil {
		s.CPU.Periods, s.CPU.Throttled, s.CPU.ThrottledNs = k.Frozen.Periods, k.Frozen.Throttled, k.Frozen.ThrottledNs
	}
}

// IsSettingsFile reports whether a cgroup file holds one of the Settings
// (or, like cpu.weight.nice, writes one), so that a write to it means
// they must be read again.
func IsSettingsFile(name string) bool {
	switch name {
	case "cpu.shares", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.idle", "memory.limit_in_bytes", "pids.max",
		"cpu.weight", "cpu.weight.nice", "cpu.max", "memory.max":
		return true
	}
	return false
}

// noTasks reports whether pids.current, read before, says that no task
// is in the cgroup or below it (it counts every task of the subtree, and
// zombies until reaped): its process and thread lists are then empty
// without being read. Being hierarchical, it spares only the lists of
// empty subtrees (stopped containers, leftovers, idle tiers), never a
// list that could hold a process.
func noTasks(s *Stats) bool {
	return s.Pids.Current != nil && *s.Pids.Current == 0
}

// ReadProcs fills s, read by Read(cgroup, withThreads) with SkipProcs, as
// Read would have without SkipProcs: pids.current where it was left out,
// then cgroup.procs unless pids.current says the subtree is empty.
func (r Reader) ReadProcs(cgroup string, withThreads bool, s *Stats) []error {
	x := &reading{r: r, cgroup: cgroup}
	x.listProcs(s, withThreads)
	return x.errs
}

// listProcs reads what SkipProcs left out: pids.current (a counter) and
// cgroup.procs as the counters do, v2's through Counters, v1's afresh
// (see countersV1).
func (x *reading) listProcs(s *Stats, withThreads bool) {
	if x.r.SkipProcs && (x.r.Places.V2 || !withThreads) {
		x.counting = true
		pids := x.r.Places.Pids
		if x.r.Places.V2 {
			pids = x.r.Places.Unified
		}
		s.Pids.Current = field(x, pids, "pids.current", ParseUint)
	}
	if x.r.Places.V2 {
		x.counting = true
		x.readProcs(x.r.Places.Unified, s)
		return
	}
	x.counting = false
	x.readProcs(x.r.Places.CPU, s)
}

func (x *reading) procs(mount string, s *Stats) {
	if x.r.SkipProcs {
		return
	}
	x.readProcs(mount, s)
}

func (x *reading) readProcs(mount string, s *Stats) {
	if noTasks(s) {
		zero := 0
		s.Procs = &zero
		return
	}
	if t, ok := x.file(mount, "cgroup.procs"); ok {
		n := CountLines(t)
		s.Procs = &n
	}
}

func (x *reading) settingsV1(s *Stats) {
	p := x.r.Places
	s.CPU.Weight = field(x, p.CPU, "cpu.shares", ParseUint)
	s.CPU.QuotaUs = field(x, p.CPU, "cpu.cfs_quota_us", func(t string) (int64, error) {
		v, err := ParseInt(t)
		if v < 0 {
			v = Unlimited // -1, or any negative: no quota
		}
		return v, err
	})
	s.CPU.PeriodUs = field(x, p.CPU, "cpu.cfs_period_us", ParseUint)
	s.CPU.Idle = field(x, p.CPU, "cpu.idle", ParseInt)
	s.Memory.LimitBytes = field(x, p.Memory, "memory.limit_in_bytes", ParseV1MemoryLimit)
	s.Pids.Max = field(x, p.Pids, "pids.max", ParseMax)
}

func (x *reading) countersV1(s *Stats, withThreads, frozen bool) {
	p := x.r.Places
	if !frozen {
		// Without a quota the counters will be frozen with the settings
		// (Settings.Frozen) and not read again: not worth a kept
		// descriptor.
		x.counting = !unlimited(s.CPU.QuotaUs)
		if t, ok := x.file(p.CPU, "cpu.stat"); ok {
			if err := parseThrottling(t, &s.CPU); err != nil {
				x.fail(p.CPU, "cpu.stat", err)
			}
		}
		x.counting = true
	}
	// cpuacct.stat (the user/system split) is not read: nothing cgwarden
	// serves uses it, and it would be one more file per cgroup per scan.
	// v2 gives the split in cpu.stat, read anyway.
	s.CPU.UsageNs = field(x, p.CPUAcct, "cpuacct.usage", ParseUint)

	s.Memory.UsageBytes = field(x, p.Memory, "memory.usage_in_bytes", ParseUint)
	if t, ok := x.file(p.Memory, "memory.stat"); ok {
		if err := parseMemoryStat(t, &s.Memory, false); err != nil {
			x.fail(p.Memory, "memory.stat", err)
		}
	}
	workingSet(&s.Memory)

	if withThreads || !x.r.SkipProcs {
		s.Pids.Current = field(x, p.Pids, "pids.current", ParseUint)
	}
	// v1 keeps the pid list of cgroup.procs and tasks for a second after
	// a read and hands it to the next read on the same open file
	// (cgroup_pidlist_start), so a kept descriptor could see processes
	// that have left; a fresh open always loads the list again.
	x.counting = false
	x.procs(p.CPU, s)
	if withThreads && noTasks(s) {
		zero := 0
		s.Threads = &zero
	} else if withThreads {
		if t, ok := x.file(p.CPU, "tasks"); ok {
			n := CountLines(t)
			s.Threads = &n
		}
	}
}

func (x *reading) settingsV2(s *Stats) {
	u := x.r.Places.Unified
	s.CPU.Weight = field(x, u, "cpu.weight", ParseUint)
	if t, ok := x.file(u, "cpu.max"); ok {
		if q, per, err := ParseCPUMax(t); err != nil {
			x.fail(u, "cpu.max", err)
		} else {
			s.CPU.QuotaUs, s.CPU.PeriodUs = &q, &per
		}
	}
	s.CPU.Idle = field(x, u, "cpu.idle", ParseInt)
	s.Memory.LimitBytes = field(x, u, "memory.max", ParseMax)
	s.Pids.Max = field(x, u, "pids.max", ParseMax)
}

func (x *reading) countersV2(s *Stats) {
	u := x.r.Places.Unified
	if t, ok := x.file(u, "cpu.stat"); ok {
		if err := parseCPUStatV2(t, &s.CPU); err != nil {
			x.fail(u, "cpu.stat", err)
		}
	}
	s.Memory.UsageBytes = field(x, u, "memory.current", ParseUint)
	if t, ok := x.file(u, "memory.stat"); ok {
		if err := parseMemoryStat(t, &s.Memory, true); err != nil {
			x.fail(u, "memory.stat", err)
		}
	}
	workingSet(&s.Memory)
	if !x.r.SkipProcs {
		s.Pids.Current = field(x, u, "pids.current", ParseUint) // spares cgroup.procs
	}
	pr := Pressure{CPU: field(x, u, "cpu.pressure", ParsePSI), Memory: field(x, u, "memory.pressure", ParsePSI),
		IO: field(x, u, "io.pressure", ParsePSI)}
	if pr.CPU != nil || pr.Memory != nil || pr.IO != nil {
		s.Pressure = &pr
	}
	x.procs(u, s)
}

// workingSet applies the kubelet's definition: usage − inactive_file,
// floored at 0; unknown when either is.
func workingSet(m *Memory) {
	if m.UsageBytes == nil || m.InactiveFileBytes == nil {
		return
	}
	ws := uint64(0)
	if *m.UsageBytes > *m.InactiveFileBytes {
		ws = *m.UsageBytes - *m.InactiveFileBytes
	}
	m.WorkingSetBytes = &ws
}

// parseThrottling reads nr_periods, nr_throttled and throttled_time (v1,
// ns) from cpu.stat.
func parseThrottling(text string, c *CPU) error {
	v, err := parseFields(text, "nr_periods", "nr_throttled", "throttled_time")
	c.Periods, c.Throttled, c.ThrottledNs = v[0], v[1], v[2]
	return err
}

// parseCPUStatV2 reads v2 cpu.stat, whose times are in µs.
func parseCPUStatV2(text string, c *CPU) error {
	v, err := parseFields(text, "usage_usec", "user_usec", "system_usec", "nr_periods", "nr_throttled", "throttled_usec")
	c.UsageNs, c.UserNs, c.SystemNs, c.Periods, c.Throttled, c.ThrottledNs = v[0], v[1], v[2], v[3], v[4], v[5]
	return err
}

// parseMemoryStat reads the working-set, RSS and fault figures: the
// hierarchical total_* keys on v1, the plain keys on v2.
func parseMemoryStat(text string, m *Memory, v2 bool) error {
	keys := []string{"total_inactive_file", "total_rss", "total_pgfault", "total_pgmajfault"}
	if v2 {
		keys = []string{"inactive_file", "anon", "pgfault", "pgmajfault"}
	}
	v, err := parseFields(text, keys...)
	m.InactiveFileBytes, m.RSSBytes, m.PageFaults, m.MajorPageFaults = v[0], v[1], v[2], v[3]
	return err
}

// parseFields returns the values of keys (at most 6) in a flat keyed file
// (EachKV), in keys' order: nil for a key the file lacks, the file's other
// keys skipped, and a key ending in "_usec" (v2's times) µs, returned as
// ns. A malformed line ends it with an error and the values before it.
func parseFields(text string, keys ...string) (v [6]*uint64, err error) {
	err = EachKV(text, func(k, s string) error {
		i := slices.Index(keys, k)
		if i < 0 {
			return nil
		}
		n, err := KVUint(k, s)
		if err != nil {
			return err
		}
		if strings.HasSuffix(k, "_usec") {
			if n > math.MaxUint64/1000 {
				return syntax("%s: %d µs overflow nanoseconds", k, n)
			}
			n *= 1000
		}
		v[i] = &n
		return nil
	})
	return v, err
}
