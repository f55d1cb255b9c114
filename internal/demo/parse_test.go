package demo

import (
	"math"
	"testing"
	"time"
)

func TestParseCPUSeconds(t *testing.T) {
	for _, c := range []struct {
		text string
		v2   bool
		want float64
		err  bool
	}{
		{"1500000000\n", false, 1.5, false},
		{"usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n", true, 2.5, false},
		{"user_usec 1\n", true, 0, true},
		{"usage_usec x\n", true, 0, true},
		{"", false, 0, true},
		{"-1", false, 0, true},
	} {
		got, err := parseCPUSeconds(c.text, c.v2)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("parseCPUSeconds(%q, %v) = %v, %v; want %v, error %v", c.text, c.v2, got, err, c.want, c.err)
		}
	}
}

func TestParseProcCgroup(t *testing.T) {
	const s = "/cgwarden-demo-01234567"
	v1 := "12:pids:/cgwarden-demo-01234567/a\n4:cpu,cpuacct:/cgwarden-demo-01234567/kubepods/pod1/c1\n0::/\n"
	for _, c := range []struct {
		text string
		v2   bool
		want string
		err  bool
	}{
		{v1, false, "kubepods/pod1/c1", false},
		{"0::/cgwarden-demo-01234567/x:y\n", true, "x:y", false},
		{"0::/cgwarden-demo-01234567\n", true, "", false},
		{"0::/system.slice/other\n", true, "", true},
		{"0::/cgwarden-demo-012345678/x\n", true, "", true}, // a prefix is not the scratch
		{"12:pids:/a\n", false, "", true},
		{"", true, "", true},
	} {
		got, err := parseProcCgroup(c.text, c.v2, s)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("parseProcCgroup(%q, %v) = %q, %v; want %q, error %v", c.text, c.v2, got, err, c.want, c.err)
		}
	}
}

// TestBusiestCPU: the figures of CI's failed window (seed 000's burners
// on CPU 0 counted 1.089 s per second) are over the slack, a sound
// window is not, and with one CPU seed 003's burner adds to seed 000's.
func TestBusiestCPU(t *testing.T) {
	jumped := Phase{
		Seed000: &Split{BurstableCores: 0.952, VMs: []VMFigure{{Cores: 0.015}, {Cores: 0.017}, {Cores: 0.105}}},
		Seed003: &Placement{ContainerCores: 0.890},
	}
	sound := Phase{
		Seed000: &Split{BurstableCores: 0.970, VMs: []VMFigure{{Cores: 0.015}, {Cores: 0.014}, {Cores: 0.015}}},
		Seed003: &Placement{ContainerCores: 0.974},
	}
	paused := Phase{Seed000: &Split{VMs: []VMFigure{{Cores: 0.332}, {Cores: 0.333}, {Cores: 0.333}}}}
	two, one := &run{cpuVM: 0, cpuMis: 1}, &run{}
	for _, c := range []struct {
		d    *run
		ph   Phase
		over bool
	}{
		{two, jumped, true},
		{two, sound, false},
		{two, paused, false},
		{one, paused, false},
		{one, sound, true},
	} {
		if got := c.d.busiestCPU(c.ph); (got > 1+overcountSlack) != c.over {
			t.Errorf("busiestCPU(%+v) with CPUs %d/%d = %.3f; want over 1+%.2f: %v", c.ph.Seed000, c.d.cpuVM, c.d.cpuMis, got, overcountSlack, c.over)
		}
	}
}

// TestFiguresUseEachCounterTime: the demo read the Burstable pod's
// counter 3 s after the VM pods' at the window's end (it was kept off the
// CPU); its cores are its CPU seconds over its own 7 s, not over the
// window's 4 s, and so the CPU adds up to one.
func TestFiguresUseEachCounterTime(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	d := &run{o: Options{Seeds: []string{Seed000}}, vms: []Pod{{Name: "vm-1-cpu", MilliCPU: 1000}}}
	a := reading{at: t0, vms: []sample{{10, at(0)}}, burst: sample{20, at(0)}}
	b := reading{at: at(4), vms: []sample{{10.2, at(4)}}, burst: sample{20 + 0.95*7, at(7)}}
	ph := d.figures(Phase{Name: PhaseBefore}, a, b, "")
	sp := ph.Seed000
	if math.Abs(sp.BurstableCores-0.95) > 1e-9 || math.Abs(sp.VMs[0].Cores-0.05) > 1e-9 {
		t.Errorf("Burstable %.3f cores, vm-1-cpu %.3f; want 0.950 and 0.050", sp.BurstableCores, sp.VMs[0].Cores)
	}
	if got := d.busiestCPU(ph); math.Abs(got-1) > 1e-9 {
		t.Errorf("busiestCPU = %.3f, want 1", got)
	}
	if ph.Seconds != 4 {
		t.Errorf("phase seconds %v, want 4", ph.Seconds)
	}
}

// TestRepayTime: a VM pod with a sixty-third of the CPU (weight 1 of
// three in a tier at 1 beside one at 20) charged 0.2 s gets nothing for
// 62 × 0.2 s; the Burstable pod after the fix (20 of 294) is back in
// 13.7 times its charge; nothing without a charge or a share.
func TestRepayTime(t *testing.T) {
	for _, c := range []struct {
		excess, share float64
		want          time.Duration
	}{
		{0.2, 1.0 / 63, 12400 * time.Millisecond},
		{0.2, 1.0 / 3, 400 * time.Millisecond},
		{0.1, 20.0 / 294, 1370 * time.Millisecond},
		{0, 1.0 / 63, 0},
		{-0.1, 1.0 / 63, 0},
		{0.2, 0, 0},
		{0.2, 1, 0},
	} {
		if got := repayTime(c.excess, c.share); (got - c.want).Abs() > time.Millisecond {
			t.Errorf("repayTime(%v, %v) = %v, want %v", c.excess, c.share, got, c.want)
		}
	}
}

// TestFiguresBySizeWithoutCPU: a window in which the VM pods got no CPU
// still says what their sizes call for (the v2 guest's table showed 0.0%
// by size), and no ratio to what they got.
func TestFiguresBySizeWithoutCPU(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := &run{o: Options{Seeds: []string{Seed000}}, vms: []Pod{{Name: "vm-1-cpu", MilliCPU: 1000}, {Name: "vm-4-cpu", MilliCPU: 4000}}}
	a := reading{at: t0, vms: []sample{{10, t0}, {20, t0}}, burst: sample{30, t0}}
	later := t0.Add(4 * time.Second)
	b := reading{at: later, vms: []sample{{10, later}, {20, later}}, burst: sample{34, later}}
	sp := d.figures(Phase{Name: PhaseBefore}, a, b, "").Seed000
	for i, want := range []float64{0.2, 0.8} {
		v := sp.VMs[i]
		if math.Abs(v.ShareBySize-want) > 1e-9 || v.ShareEqual != 0.5 || v.ShareOfVMs != 0 || v.PerSize != 0 || v.PerEqual != 0 {
			t.Errorf("%s: by size %v (want %v), equal %v, of VMs %v, per size %v, per equal %v", v.Name, v.ShareBySize, want, v.ShareEqual, v.ShareOfVMs, v.PerSize, v.PerEqual)
		}
	}
}

// TestEntitledBy: the shares the weights give seed 000's cgroups before
// (tiers 1 and 20 on v2), with the Burstable pod paused, and after.
func TestEntitledBy(t *testing.T) {
	for _, c := range []struct {
		weights []uint64
		paused  bool
		vms     []float64
		burst   float64
	}{
		{[]uint64{1, 20, 1, 1, 1}, false, []float64{1.0 / 63, 1.0 / 63, 1.0 / 63}, 20.0 / 21},
		{[]uint64{1, 20, 1, 1, 1}, true, []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, 0},
		{[]uint64{274, 20, 39, 79, 157}, false, []float64{274.0 / 294 * 39 / 275, 274.0 / 294 * 79 / 275, 274.0 / 294 * 157 / 275}, 20.0 / 294},
	} {
		e := entitledBy(c.weights, c.paused)
		if len(e.vms) != len(c.vms) || math.Abs(e.burst-c.burst) > 1e-9 {
			t.Fatalf("entitledBy(%v, %v) = %+v, want VM pods %v, Burstable %v", c.weights, c.paused, e, c.vms, c.burst)
		}
		for i := range c.vms {
			if math.Abs(e.vms[i]-c.vms[i]) > 1e-9 {
				t.Errorf("entitledBy(%v, %v): VM pod %d %v, want %v", c.weights, c.paused, i, e.vms[i], c.vms[i])
			}
		}
	}
}

// TestOverCharged: the interval in which CI's v2 guest charged vm-4-cpu
// a stall (0.2 s of half a second, for a weight that gives it 8 ms) is
// over-charged by what it got beyond its share; a sound interval is not,
// nor the Burstable pod getting its 95%; with one CPU nothing is checked.
func TestOverCharged(t *testing.T) {
	t0 := time.Unix(1000, 0)
	half := t0.Add(500 * time.Millisecond)
	vms := []Pod{{Name: "vm-1-cpu"}, {Name: "vm-2-cpu"}, {Name: "vm-4-cpu"}}
	two := &run{o: Options{Seeds: []string{Seed000}}, vms: vms, burst: Pod{Name: "app"}, cpuVM: 0, cpuMis: 1}
	one := &run{o: two.o, vms: vms, burst: two.burst}
	due := entitledBy([]uint64{1, 20, 1, 1, 1}, false)
	x := reading{vms: []sample{{1, t0}, {1, t0}, {1, t0}}, burst: sample{10, t0}}
	read := func(vm4, burst float64) reading {
		return reading{vms: []sample{{1.008, half}, {1.008, half}, {1 + vm4, half}}, burst: sample{10 + burst, half}}
	}
	for _, c := range []struct {
		d      *run
		y      reading
		cgroup string
		over   float64
	}{
		{two, read(0.2, 0.3), "vm-4-cpu", 0.2 - 0.5/63},
		{two, read(0.008, 0.476), "", 0},
		{two, read(0.008, 0.5), "", 0},
		{one, read(0.2, 0.3), "", 0},
	} {
		got := c.d.overCharged(x, c.y, due)
		if c.over > 0 {
			if want := half.Add(repayTime(c.over, 1.0/63)); !got.repaid.Equal(want) {
				t.Errorf("overCharged: taken back at %v, want %v", got.repaid.Sub(t0), want.Sub(t0))
			}
		}
		if got.cgroup != c.cgroup || math.Abs(got.seconds-c.over) > 1e-9 {
			t.Errorf("overCharged (vm-4-cpu %.3f s, Burstable %.3f s in 0.5 s, CPUs %d/%d) = %+v; want %q over by %.3f s",
				c.y.vms[2].sec-1, c.y.burst.sec-10, c.d.cpuVM, c.d.cpuMis, got, c.cgroup, c.over)
		}
	}
}

// TestBending: a charge the window holds whole (taken back before it
// closes) leaves its figures sound; one taken back after it closes, or one
// from the settling not taken back when it opened, bends them, and of two
// the one taken back last is the one to wait for.
func TestBending(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	opened, closed := at(1), at(5)
	held := charge{cgroup: "vm-1-cpu", repaid: at(4)}
	spills := charge{cgroup: "vm-2-cpu", repaid: at(6)}
	spillsMore := charge{cgroup: "vm-4-cpu", repaid: at(7)}
	settledOut := charge{cgroup: "vm-1-cpu", repaid: at(0.8)}
	settledIn := charge{cgroup: "app", repaid: at(1.5)}
	for _, c := range []struct {
		before, in []charge
		want       string
	}{
		{nil, nil, ""},
		{nil, []charge{held}, ""},
		{[]charge{settledOut}, []charge{held}, ""},
		{nil, []charge{held, spills}, "vm-2-cpu"},
		{nil, []charge{spillsMore, spills}, "vm-4-cpu"},
		{[]charge{settledIn}, []charge{held}, "app"},
		{[]charge{settledIn}, []charge{spills}, "vm-2-cpu"},
	} {
		if got := bending(c.before, c.in, opened, closed); got.cgroup != c.want {
			t.Errorf("bending(%v, %v) = %q, want %q", c.before, c.in, got.cgroup, c.want)
		}
	}
}
