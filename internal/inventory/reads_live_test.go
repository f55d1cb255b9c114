package inventory_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/stats"
)

// TestSteadyScanReadsOnlyWhatItUses counts, through the one door to the
// cgroup filesystem (cgroupfs.Host.Counts), the files a steady-state
// scan of an unchanged idle node reads, as the agent scans it
// (ProcsWhereUsed): each cgroup's counters (pids.current only where it
// may spare a list), v1's thread lists of the non-leaf cgroups that hold
// tasks (their threads compete with the child groups), /proc/meminfo,
// and nothing else: no listing, no setting
// (nothing changed them, and the periodic re-read is pushed past the
// test), no process list (the pods are healthy: no count is used).
func TestSteadyScanReadsOnlyWhatItUses(t *testing.T) {
	s := realtest.NewScratch(t)
	var ctrs []string
	for i := range 3 {
		pod := fmt.Sprintf("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%08d_1111_4111_8111_111111111111.slice", i)
		for j := range 2 {
			ctrs = append(ctrs, fmt.Sprintf("%s/cri-containerd-%064d.scope", pod, 10*i+j))
		}
	}
	made := map[string]bool{}
	for _, c := range ctrs {
		parts := strings.Split(c, "/")
		for k := range parts {
			if rel := strings.Join(parts[:k+1], "/"); !made[rel] {
				s.Mkdir(rel)
				made[rel] = true
			}
		}
	}
	for _, c := range ctrs {
		cmd := s.Start(c, "sleep", "3600")
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	sc, err := inventory.Open(s.Host)
	if err != nil {
		t.Fatal(err)
	}
	sc.Base, sc.ProcsWhereUsed = s.Name, true
	st, err := inventory.NewSteady(sc, s.Host, inventory.SteadyOptions{Every: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	scan := func() (*inventory.Node, uint64) {
		t.Helper()
		before, _, _ := s.Host.Counts()
		n, err := sc.Scan(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		after, _, _ := s.Host.Counts()
		return n, after - before
	}
	scan() // the first scan reads everything and keeps the counters open
	for round := range 3 {
		n, reads := scan()
		if len(n.Errors) > 0 {
			t.Fatalf("read errors: %v", n.Errors)
		}
		// pids.current only where it can spare a v1 thread list.
		counters := 3 // v1: cpuacct.usage, memory.usage_in_bytes, memory.stat
		if s.V2() {
			counters = 6 // cpu.stat, memory.current, memory.stat, 3 pressure files
		}
		want, threads, procs := 1, 0, 0 // /proc/meminfo
		n.Root.Walk(func(c *inventory.Cgroup) {
			want += counters
			if q := c.Stats.CPU.QuotaUs; !s.V2() && (q == nil || *q != stats.Unlimited) {
				want++ // v1 cpu.stat: the throttling counters move with a quota
			}
			if !s.V2() && c != n.Root && len(c.Children) > 0 {
				want++ // pids.current
				if c.Stats.Pids.Current == nil || *c.Stats.Pids.Current > 0 {
					threads++
				}
			} else if c.Stats.Pids.Current != nil {
				t.Errorf("round %d: %s: pids.current read where it spares no list", round, c.Path)
			}
			if c.Stats.Procs != nil {
				procs++
			}
		})
		if procs > 0 {
			t.Errorf("round %d: %d process lists read, want none (no count is used on a healthy node)", round, procs)
		}
		if want += threads; reads != uint64(want) {
			t.Errorf("round %d: a steady scan of %d unchanged cgroups read %d files, want %d (counters, %d thread lists, /proc/meminfo)",
				round, n.Cgroups, reads, want, threads)
		}
	}
}
