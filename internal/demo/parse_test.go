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

// TestRepayTime: CI's v2 guest over-charged a weight-1 VM pod 0.45 s
// beside a Burstable tier at 20, and the next window gave the VM pods
// nothing; the wait before measuring again is what the lightest cgroup
// takes to pay that back, bounded, and none without an excess.
func TestRepayTime(t *testing.T) {
	for _, c := range []struct {
		excess  float64
		weights []uint64
		want    time.Duration
	}{
		{0.45, []uint64{1, 20, 1, 1, 1}, 9 * time.Second},               // before: tiers 1 and 20
		{0.45, []uint64{274, 20, 39, 79, 157}, 6165 * time.Millisecond}, // after: the Burstable tier is the lightest
		{5, []uint64{1, 20}, maxRepay},
		{0, []uint64{1, 20}, 0},
		{-0.1, []uint64{1, 20}, 0},
		{0.45, []uint64{0, 20}, 0}, // a weight not read
	} {
		if got := repayTime(c.excess, c.weights); (got - c.want).Abs() > time.Millisecond {
			t.Errorf("repayTime(%v, %v) = %v, want %v", c.excess, c.weights, got, c.want)
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
