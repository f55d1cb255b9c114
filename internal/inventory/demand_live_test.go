package inventory_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// TestFairShareMatchesTheKernel validates the demand-aware fair share
// against the live scheduler: three burners in sibling cgroups weighted
// 1:2:4 and a fourth whose demand is capped below its weight's share by a
// CFS quota, all pinned to one CPU (capacity 1 core). The split predicted
// from the threads' run + wait times by water-filling must be within 5
// percentage points of the split the cgroups' usage shows over the same
// window. On v1 the weights are cpu.shares 1024:2048:4096 and the quota
// cpu.cfs_quota_us; on v2 cpu.weight 100:200:400 and cpu.max. The kernel
// gives the capped group its quota (10%) and splits the rest 1:2:4, so
// the expected split is about 12.9 / 25.7 / 51.4 / 10 percent.
func TestFairShareMatchesTheKernel(t *testing.T) {
	realtest.LockCPU(t)
	s := realtest.NewScratch(t)
	type grp struct {
		rel            string
		shares, weight string
	}
	// The machine may be busy with other work on CPU 0: weigh the scratch
	// cgroup itself at the maximum so that the burners get most of it
	// (the split among them does not depend on how much they get).
	if s.V2() {
		s.Write("", "cpu.weight", "10000")
	} else {
		s.Write("", "cpu.shares", "262144")
	}
	groups := []grp{{"w1", "1024", "100"}, {"w2", "2048", "200"}, {"w4", "4096", "400"}, {"capped", "4096", "400"}}
	for _, g := range groups {
		s.Mkdir(g.rel)
		if s.V2() {
			s.Write(g.rel, "cpu.weight", g.weight)
		} else {
			s.Write(g.rel, "cpu.shares", g.shares)
		}
	}
	if s.V2() {
		s.Write("capped", "cpu.max", "10000 100000")
	} else {
		s.Write("capped", "cpu.cfs_period_us", "100000")
		s.Write("capped", "cpu.cfs_quota_us", "10000")
	}
	for _, g := range groups {
		s.Burn(g.rel, 0)
	}
	time.Sleep(500 * time.Millisecond) // let the burners settle on CPU 0

	sc, err := inventory.Open(s.Host)
	if err != nil {
		t.Fatal(err)
	}
	sc.Base = s.Name
	sample := func() (*inventory.Node, *inventory.ThreadTimes) {
		n, err := sc.Scan(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		tt, errs := sc.ReadThreadTimes(n, time.Now())
		if len(errs) > 0 {
			t.Fatalf("reading thread times: %v", errs)
		}
		return n, tt
	}
	n1, tt1 := sample()
	time.Sleep(3 * time.Second)
	n2, tt2 := sample()
	inventory.Rate(n1, n2)
	n2.CPUs = 1 // every burner is pinned to CPU 0: the capacity they share is one core
	inventory.FairShare(tt1, tt2, n2, s.V2(), nil)

	var predSum, usedSum float64
	pred, used := map[string]float64{}, map[string]float64{}
	for _, g := range groups {
		c := n2.Find(s.Cgroup(g.rel))
		if c == nil || c.FairCores == nil || c.UsageCores == nil || c.DemandCores == nil {
			t.Fatalf("%s: no fair share or usage in the scan", g.rel)
		}
		// A burner is runnable all the time: its demand is one core
		// (the capped one's is its quota).
		wantDemand := 1.0
		if g.rel == "capped" {
			wantDemand = 0.1
		}
		if math.Abs(*c.DemandCores-wantDemand) > 0.05 {
			t.Errorf("%s: demand %.3f cores, want %.2f", g.rel, *c.DemandCores, wantDemand)
		}
		pred[g.rel], used[g.rel] = *c.FairCores, *c.UsageCores
		predSum += *c.FairCores
		usedSum += *c.UsageCores
	}
	if usedSum < 0.2 {
		t.Fatalf("the four burners used only %.2f cores of CPU 0 in total", usedSum)
	}
	report := ""
	for _, g := range groups {
		p, m := pred[g.rel]/predSum*100, used[g.rel]/usedSum*100
		report += fmt.Sprintf(" %s predicted %.1f%% measured %.1f%%;", g.rel, p, m)
		if math.Abs(p-m) > 5 {
			t.Errorf("%s: predicted %.1f%% of the CPU, measured %.1f%%: more than 5 points apart", g.rel, p, m)
		}
	}
	t.Logf("cgroup %s, 3 s window, CPU 0 shared by 4 burners (%.2f cores used):%s", versionName(s.V2()), usedSum, report)
}

func versionName(v2 bool) string {
	if v2 {
		return "v2"
	}
	return "v1"
}
