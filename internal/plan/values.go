package plan

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cgwarden/cgwarden/internal/fairness"
)

// Kernel ranges (kernel/sched/core.c, mm/memcontrol*.c, kernel/cgroup/pids.c;
// the weights' are fairness's).
const (
	// CFS periods are 1 ms .. 1 s; a quota is at least 1 ms and at most
	// the kernel's MAX_BW (2^44 - 1 µs).
	MinPeriodUs = 1000
	MaxPeriodUs = 1000000
	MinQuotaUs  = 1000
	MaxQuotaUs  = 1<<44 - 1
	// pids.max is at most PID_MAX_LIMIT (4M on 64-bit).
	MaxPids = 4 * 1024 * 1024
)

// ValueError is a value outside what the kernel accepts for a file.
type ValueError struct {
	File, Value, Want string
}

func (e *ValueError) Error() string {
	return fmt.Sprintf("%s: %q is not a value the kernel accepts (want %s)", e.File, e.Value, e.Want)
}

// Validate checks value against the kernel's range for file (a cgroup
// file's base name). Files cgwarden never writes are refused, so a plan
// cannot smuggle a write to, say, release_agent.
func Validate(file, value string) error {
	v := strings.TrimSpace(value)
	bad := func(want string) error { return &ValueError{file, value, want} }
	switch file {
	case "cpu.shares":
		if !intIn(v, fairness.MinShares, fairness.MaxShares) {
			return bad(fmt.Sprintf("an integer %d..%d", fairness.MinShares, fairness.MaxShares))
		}
	case "cpu.weight":
		if !intIn(v, fairness.MinWeight, fairness.MaxWeight) {
			return bad(fmt.Sprintf("an integer %d..%d", fairness.MinWeight, fairness.MaxWeight))
		}
	case "cpu.cfs_period_us":
		if !intIn(v, MinPeriodUs, MaxPeriodUs) {
			return bad(fmt.Sprintf("an integer %d..%d", MinPeriodUs, MaxPeriodUs))
		}
	case "cpu.cfs_quota_us":
		if v != "-1" && !intIn(v, MinQuotaUs, MaxQuotaUs) {
			return bad(fmt.Sprintf("-1 or an integer %d..%d", MinQuotaUs, int64(MaxQuotaUs)))
		}
	case "cpu.max":
		f := strings.Fields(v)
		if len(f) < 1 || len(f) > 2 || (f[0] != "max" && !intIn(f[0], MinQuotaUs, MaxQuotaUs)) ||
			(len(f) == 2 && !intIn(f[1], MinPeriodUs, MaxPeriodUs)) {
			return bad(`"max" or a quota, then optionally a period, in µs`)
		}
	case "memory.limit_in_bytes":
		// -1 and any positive byte count (the kernel rounds to pages;
		// "unlimited" reads back as the largest page-aligned int64).
		if v != "-1" && !intIn(v, 1, 1<<63-1) {
			return bad("-1 or a positive byte count")
		}
	case "memory.max", "memory.high":
		if v != "max" && !intIn(v, 0, 1<<63-1) {
			return bad(`"max" or a byte count`)
		}
	case "pids.max":
		if v != "max" && !intIn(v, 0, MaxPids) {
			return bad(fmt.Sprintf(`"max" or an integer 0..%d`, MaxPids))
		}
	case "memory.move_charge_at_immigrate":
		if !intIn(v, 0, 3) {
			return bad("0..3")
		}
	case "cgroup.subtree_control":
		if _, err := ParseControlChange(v); err != nil {
			return bad(`space-separated "+controller" or "-controller"`)
		}
	case "cgroup.procs":
		if !intIn(v, 1, 1<<22) {
			return bad("a process id")
		}
	default:
		return &ValueError{file, value, "a file cgwarden writes"}
	}
	return nil
}

func intIn(s string, lo, hi int64) bool {
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n >= lo && n <= hi
}

// controllers cgwarden may enable or disable on v2.
var knownControllers = map[string]bool{"cpu": true, "memory": true, "pids": true, "io": true, "cpuset": true, "hugetlb": true, "rdma": true, "misc": true}

// ParseControlChange parses a cgroup.subtree_control write ("+cpu -io")
// into controller → enable.
func ParseControlChange(s string) (map[string]bool, error) {
	out := map[string]bool{}
	f := strings.Fields(s)
	if len(f) == 0 {
		return nil, fmt.Errorf("empty controller change")
	}
	for _, t := range f {
		if len(t) < 2 || (t[0] != '+' && t[0] != '-') || !knownControllers[t[1:]] {
			return nil, fmt.Errorf("bad controller change %q", t)
		}
		out[t[1:]] = t[0] == '+'
	}
	return out, nil
}

// ControlUndo returns the cgroup.subtree_control write that turns the
// controllers listed in cur back into those listed in prev (both as read
// from the file: "cpu memory"), or "" when they already agree.
func ControlUndo(prev, cur string) string {
	was := map[string]bool{}
	for _, c := range strings.Fields(prev) {
		was[c] = true
	}
	var out []string
	now := map[string]bool{}
	for _, c := range strings.Fields(cur) {
		now[c] = true
		if !was[c] {
			out = append(out, "-"+c)
		}
	}
	for _, c := range strings.Fields(prev) {
		if !now[c] {
			out = append(out, "+"+c)
		}
	}
	return strings.Join(out, " ")
}
