package inventory

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/stats"
)

// ThreadTimes is one reading, at one instant, of how long every thread of
// the tree has been runnable: for each cgroup (by path), each thread
// sitting directly in it, its run time plus its run-queue wait time, in
// ns, from /proc/<tid>/task/<tid>/schedstat (fields 1 and 2).
//
// Why run + wait: a thread's usage says what it got, not what it wanted.
// On a saturated node usage equals capacity and says nothing about who is
// starved; the time a thread spent waiting on a run queue is exactly the
// CPU it wanted and did not get. Run + wait over an interval is the time
// the thread was runnable — its demand. Sleeping threads add nothing.
// Time a throttled thread spends off the run queue is counted as waiting
// by the kernel (sched_info counts from enqueue to pick), so a
// quota-limited thread reads as busy; the cgroup's quota caps it.
type ThreadTimes struct {
	Time time.Time
	// ByCgroup maps a cgroup path to its threads' runnable ns. A cgroup
	// whose thread list could not be read is absent (its demand is then
	// unknown); an empty map means no threads.
	ByCgroup map[string]map[int]uint64
}

// ReadThreadTimes reads the thread lists (v1 tasks in the cpu hierarchy,
// v2 cgroup.threads) of every cgroup of n below its root and the schedstat
// of each thread, all through the Scanner's FS (a snapshot can carry
// them). Threads of the root cgroup are not read: they are not counted in
// the fair share either (see Node.Guarantee). A thread that exits between
// the two reads is skipped; files that exist but do not parse are
// returned as errors and their thread is skipped.
func (s *Scanner) ReadThreadTimes(n *Node, now time.Time) (*ThreadTimes, []error) {
	tt := &ThreadTimes{Time: now, ByCgroup: map[string]map[int]uint64{}}
	var errs []error
	list := "tasks"
	mount := s.Places.CPU
	if s.Places.V2 {
		list, mount = "cgroup.threads", s.Places.Unified
	}
	n.Root.Walk(func(c *Cgroup) {
		if c == n.Root || c.Stats.Gone {
			return
		}
		p := path.Join(mount, c.Path, list)
		raw, err := s.FS.ReadFile(p)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, &stats.FileError{Path: p, Err: err})
			}
			return
		}
		tids, err := stats.ParsePIDs(string(raw))
		if err != nil {
			errs = append(errs, &stats.FileError{Path: p, Err: err})
			return
		}
		m := make(map[int]uint64, len(tids))
		for _, tid := range tids {
			sp := fmt.Sprintf("/proc/%d/task/%d/schedstat", tid, tid)
			b, err := s.FS.ReadFile(sp)
			if err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, &stats.FileError{Path: sp, Err: err})
				}
				continue // exited
			}
			v, err := ParseSchedstat(string(b))
			if err != nil {
				errs = append(errs, &stats.FileError{Path: sp, Err: err})
				continue
			}
			m[tid] = v
		}
		tt.ByCgroup[c.Path] = m
	})
	return tt, errs
}

// RunnableSamples counts, for each thread, how many times it was found
// runnable (state R in /proc/<tid>/task/<tid>/stat) among Samples looks
// taken during the interval.
//
// Why both this and run + wait: the kernel adds a thread's run-queue wait
// to its schedstat only when the thread is picked to run. A thread that is
// starved — runnable the whole interval and never picked, as a BestEffort
// VM's vCPU beside busy Burstable pods is (weight 2 against 32076 gives it
// one slice every tens of seconds) — shows no wait at all in schedstat.
// Sampling its state sees it runnable every time.
type RunnableSamples struct {
	Samples  int
	Runnable map[int]int
}

// SampleRunnable looks once at the state of every thread of tt and counts
// the runnable ones into rs. Threads that have exited are skipped.
func (s *Scanner) SampleRunnable(tt *ThreadTimes, rs *RunnableSamples) {
	if rs.Runnable == nil {
		rs.Runnable = map[int]int{}
	}
	rs.Samples++
	for _, m := range tt.ByCgroup {
		for tid := range m {
			b, err := s.FS.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", tid, tid))
			if err != nil {
				continue
			}
			if st, err := ParseProcState(string(b)); err == nil && st == 'R' {
				rs.Runnable[tid]++
			}
		}
	}
}

// ParseProcState returns the state letter of a /proc/<pid>/stat line (the
// first field after the parenthesised command, which may hold spaces and
// parentheses itself).
func ParseProcState(text string) (byte, error) {
	i := strings.LastIndexByte(text, ')')
	if i < 0 || i+2 >= len(text) || text[i+1] != ' ' {
		return 0, fmt.Errorf("stat: no state after the command in %q", clip(text, 60))
	}
	return text[i+2], nil
}

// ParseSchedstat reads /proc/<pid>/task/<tid>/schedstat ("<run ns> <wait
// ns> <timeslices>") and returns run + wait.
func ParseSchedstat(text string) (uint64, error) {
	f := strings.Fields(text)
	if len(f) != 3 {
		return 0, fmt.Errorf("schedstat: want 3 fields, got %d", len(f))
	}
	run, err1 := strconv.ParseUint(f[0], 10, 64)
	wait, err2 := strconv.ParseUint(f[1], 10, 64)
	if _, err3 := strconv.ParseUint(f[2], 10, 64); err1 != nil || err2 != nil || err3 != nil {
		return 0, fmt.Errorf("schedstat: %q is not three counters", clip(text, 60))
	}
	if run > math.MaxUint64-wait {
		return 0, fmt.Errorf("schedstat: %q overflows", clip(text, 60))
	}
	return run + wait, nil
}

// clip keeps an error message short: s up to n bytes.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// minRunnableSamples is the fewest state looks that say anything about a
// thread's runnable fraction.
const minRunnableSamples = 5

// FairShare fills DemandCores and FairCores of every cgroup of cur from
// two thread readings interval apart (prev taken with the scan before cur,
// both of the same tree), by hierarchical water-filling
// (fairness.WaterFill) over the node's CPUs.
//
// A thread's demand is its runnable time over the interval divided by the
// interval, at most 1 core (a thread runs on one CPU at a time); a thread
// born during the interval counts from 0. When rs holds enough state
// samples taken during the interval, a thread's demand is at least the
// fraction of them that found it runnable (see RunnableSamples: this is
// what catches a fully starved thread). A leaf cgroup's demand is the
// sum of its threads'; when its thread list is unknown (a snapshot taken
// without it) its measured usage stands in — a lower bound, right for
// cgroups that are not starved. A cgroup with neither is assumed busy
// (unbounded demand), as Guarantee assumes of everyone. On v1, threads in
// a non-leaf cgroup compete with its children at weight 1024 each, with
// their own demands. Every group's demand is capped by its CFS quota.
// Weights are the raw weight files; unknown weights count at the default.
func FairShare(prev, cur *ThreadTimes, n *Node, v2 bool, rs *RunnableSamples) {
	if prev == nil || cur == nil || n == nil || n.Root == nil {
		return
	}
	dt := cur.Time.Sub(prev.Time).Seconds()
	if dt <= 0 {
		return
	}
	before := map[int]uint64{}
	for _, m := range prev.ByCgroup {
		for tid, v := range m {
			before[tid] = v
		}
	}
	threadDemands := func(c *Cgroup) ([]float64, bool) {
		m, ok := cur.ByCgroup[c.Path]
		if !ok {
			return nil, false
		}
		out := make([]float64, 0, len(m))
		for tid, v := range m {
			b := before[tid] // 0 for a thread born during the interval
			if v < b {
				b = 0 // tid reused by a new thread
			}
			d := float64(v-b) / 1e9 / dt
			if rs != nil && rs.Samples >= minRunnableSamples {
				d = math.Max(d, float64(rs.Runnable[tid])/float64(rs.Samples))
			}
			out = append(out, math.Min(1, d))
		}
		return out, true
	}
	def := float64(fairness.DefaultShares)
	if v2 {
		def = fairness.DefaultWeight
	}
	var build func(c *Cgroup) *fairness.DemandGroup
	build = func(c *Cgroup) *fairness.DemandGroup {
		g := &fairness.DemandGroup{Weight: def, ThreadWeight: fairness.ThreadWeightV1, Cap: float64(n.CPUs)}
		if w := c.Stats.CPU.Weight; w != nil {
			g.Weight = float64(*w)
		}
		if q := c.Stats.CPU.QuotaUs; q != nil && *q > 0 && c.Stats.CPU.PeriodUs != nil && *c.Stats.CPU.PeriodUs > 0 {
			g.Cap = math.Min(g.Cap, float64(*q)/float64(*c.Stats.CPU.PeriodUs))
		}
		for _, ch := range c.Children {
			g.Children = append(g.Children, build(ch))
		}
		if c == n.Root {
			return g
		}
		own, known := threadDemands(c)
		switch {
		case c.Stats.Gone:
			// Vanished during the scan: it wants nothing any more.
		case len(c.Children) > 0:
			if !v2 {
				g.Own = own
			}
		case known:
			g.Own = own
		case c.UsageCores != nil:
			g.Own = []float64{*c.UsageCores}
		default:
			g.Own = []float64{math.Inf(1)}
		}
		return g
	}
	root := build(n.Root)
	fairness.WaterFill(root, float64(n.CPUs))
	zip(n.Root, root, func(g *fairness.DemandGroup) []*fairness.DemandGroup { return g.Children }, func(c *Cgroup, g *fairness.DemandGroup) {
		d, f := g.Demand, g.Fair
		if !math.IsInf(d, 0) {
			c.DemandCores = &d
		}
		c.FairCores = &f
	})
}
