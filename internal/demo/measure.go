package demo

import (
	"context"
	"fmt"
	"math"
	"os"
	"path"
	"slices"
	"time"

	"github.com/cgwarden/cgwarden/internal/inventory"
)

// sample is one cgroup's CPU counter and when it was read. Each counter
// keeps its own time: the demo reads them from outside the scratch,
// weighed far below its burners, and can wait for the CPU between two
// reads (seconds on a busy machine), or between a read and its clock. One timestamp for all of them
// charged a window's CPU against too short a wall time: 8 CPU seconds
// per second on one CPU in a run here, and CI's v2 guest gave a weight-1
// burner 0.105 cores where its weight allowed 0.016.
type sample struct {
	sec float64
	at  time.Time
}

// reading is the CPU counters of the cgroups a phase compares.
type reading struct {
	at        time.Time // when the reading began
	vms       []sample
	burst     sample
	pod, ctr  sample // seed 003: the pod's own cgroup, the container's
	misplaced sample // seed 003: the runtime's directory at the top
}

// read takes the counters. ctrRel is where seed 003's container's
// processes are now.
func (d *run) read(ctrRel string) (reading, error) {
	r := reading{at: time.Now()}
	var err error
	for _, p := range d.vms {
		v, e := d.sample(p.rel)
		if e != nil {
			return r, e
		}
		r.vms = append(r.vms, v)
	}
	if d.has(Seed000) {
		if r.burst, err = d.sample(d.burst.rel); err != nil {
			return r, err
		}
	}
	if d.has(Seed003) {
		if r.pod, err = d.sample(d.mis.rel); err != nil {
			return r, err
		}
		if r.ctr, err = d.sample(ctrRel); err != nil {
			return r, err
		}
		if r.misplaced, err = d.sample(d.mis.ctrRel); err != nil {
			return r, err
		}
	}
	return r, nil
}

// sample reads rel's counter between two timestamps and dates it at
// their midpoint. When the two are more than sampleSpan apart the demo
// lost the CPU around the read, and the counter is read again, up to
// sampleTries times; the closest pair wins.
func (d *run) sample(rel string) (sample, error) {
	var best sample
	bestSpan := time.Duration(math.MaxInt64)
	for range sampleTries {
		t1 := time.Now()
		v, err := d.s.cpuSeconds(rel)
		if err != nil {
			return best, err
		}
		span := time.Since(t1)
		if span < bestSpan {
			best, bestSpan = sample{sec: v, at: t1.Add(span / 2)}, span
		}
		if span <= sampleSpan {
			break
		}
	}
	return best, nil
}

const (
	sampleSpan  = 2 * time.Millisecond
	sampleTries = 5
)

// whereIs is the cgroup of pid in the cpu (v1) or unified (v2)
// hierarchy, relative to the scratch.
func (d *run) whereIs(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", fmt.Errorf("where is process %d: %w", pid, err)
	}
	rel, err := parseProcCgroup(string(b), d.s.v2, d.s.name)
	if err != nil {
		return "", fmt.Errorf("process %d: %w", pid, err)
	}
	return rel, nil
}

// measure runs one phase: it measures a window (see window), again when
// the kernel's counters add up to more than the wall time allows, and
// returns the figures with a scan of the scratch whose CPU rates cover
// the phase. With pauseBurst the Burstable pod's burner is
// stopped for the phase.
//
// The burners are stopped (SIGSTOP) while the scratch is scanned, and
// stay stopped when the phase ends, until the next one: the demo itself
// competes with them for the CPUs from outside the scratch, weighed far
// below it, and its scans, audit, fix and revert would otherwise crawl
// (minutes under emulation).
func (d *run) measure(ctx context.Context, name string, pauseBurst bool) (Phase, *inventory.Node, error) {
	ph := Phase{Name: name, BurstablePaused: pauseBurst}
	ctrRel := ""
	if d.has(Seed003) {
		var err error
		if ctrRel, err = d.whereIs(d.misBurn.pid()); err != nil {
			return ph, nil, err
		}
	}
	d.freeze(true)
	first, sc, err := d.scan()
	if err != nil {
		return ph, nil, err
	}
	d.freeze(false)
	if pauseBurst {
		pause(d.burstPID, true)
	}
	defer d.freeze(true)
	base := ph
	for try := 1; ; try++ {
		a, b, err := d.window(ctx, base, ctrRel)
		if err != nil {
			return ph, nil, err
		}
		ph = d.figures(base, a, b, ctrRel)
		busiest := d.busiestCPU(ph)
		if busiest <= 1+overcountSlack {
			break
		}
		if try == windows {
			return ph, nil, fmt.Errorf("%s: the kernel counted %.2f CPU seconds per second of wall time on one CPU in each of %d windows: the counters and the clock disagree (the demo kept off the CPU, or an emulated machine's clock?)", name, busiest, windows)
		}
		excess := (d.onVMCPU(ph) - 1) * ph.Seconds
		wait, err := d.repayWait(excess)
		if err != nil {
			return ph, nil, err
		}
		if wait == 0 {
			d.say("%s: the kernel counted %.2f CPU seconds per second of wall time on one CPU, more than it has; measuring again", name, busiest)
			continue
		}
		d.say("%s: the kernel counted %.2f CPU seconds per second of wall time on one CPU, more than it has; measuring again after %.1f s, while the scheduler takes back the %.2f s it over-charged", name, busiest, wait.Seconds(), excess)
		if err := sleep(ctx, wait); err != nil {
			return ph, nil, err
		}
	}
	d.freeze(true)
	second, err := sc.Scan(time.Now())
	if err != nil {
		return ph, nil, fmt.Errorf("scanning the scratch: %w", err)
	}
	inventory.Rate(first, second)
	if err := d.weights(&ph); err != nil {
		return ph, nil, err
	}
	d.say("%s", ph.Line())
	return ph, second, nil
}

// settle is how long the burners run before a phase's window opens.
const settle = 500 * time.Millisecond

// A window is measured again when the CPU seconds the kernel counted on
// one CPU exceed the wall time by more than overcountSlack; after windows
// such windows the phase fails rather than print figures that cannot be.
// Each counter is dated by the clock on either side of its read (see
// sample), but an emulated machine's clocks can jump.
const (
	overcountSlack = 0.05
	windows        = 3
)

// window lets the burners run for settle, then reads the counters for the
// phase's duration, showing the figures so far every half second.
func (d *run) window(ctx context.Context, ph Phase, ctrRel string) (a, b reading, err error) {
	if err := sleep(ctx, settle); err != nil {
		return a, b, err
	}
	if a, err = d.read(ctrRel); err != nil {
		return a, b, err
	}
	end := a.at.Add(d.o.Duration)
	d.progressStart(ph.Name)
	defer d.progressEnd()
	for {
		wait := time.Until(end)
		if wait <= 0 {
			break
		}
		if err := sleep(ctx, min(wait, 500*time.Millisecond)); err != nil {
			return a, b, err
		}
		if b, err = d.read(ctrRel); err != nil {
			return a, b, err
		}
		d.progress(ph.Name, d.figures(ph, a, b, ctrRel))
	}
	b, err = d.read(ctrRel)
	return a, b, err
}

// busiestCPU is the most CPU seconds per wall second a phase's figures
// put on one CPU: seed 000's burners share one, seed 003's burner has
// the other (or the same one, on a machine with one CPU).
func (d *run) busiestCPU(ph Phase) float64 {
	return max(d.onVMCPU(ph), misCores(ph))
}

// onVMCPU is the CPU seconds per wall second a phase's figures put on
// seed 000's CPU: its burners', and seed 003's when it has the same CPU.
func (d *run) onVMCPU(ph Phase) float64 {
	var c float64
	if sp := ph.Seed000; sp != nil {
		c = sp.BurstableCores
		for _, v := range sp.VMs {
			c += v.Cores
		}
	}
	if d.cpuVM == d.cpuMis {
		c += misCores(ph)
	}
	return c
}

func misCores(ph Phase) float64 {
	if p := ph.Seed003; p != nil {
		return p.ContainerCores
	}
	return 0
}

// repayWait is how long seed 000's burners must run before a window
// measured after one the kernel over-charged shows their weights again.
//
// The scheduler keeps what it charged. In CI's v2 guest a clock jump
// charged a weight-1 VM pod's burner 0.45 s it never ran (1.10 CPU s per
// s over the window); the next window gave the VM pods 0.0% of the CPU
// for their weight's 4.8%, as the BestEffort tier, 20 times lighter than
// the Burstable one, paid the 0.45 s back at a twentieth of the CPU. An
// excess charged to the lightest of the competing cgroups is paid back
// in excess × (heaviest weight / lightest) seconds; the wait is that,
// up to maxRepay.
func (d *run) repayWait(excess float64) (time.Duration, error) {
	if excess <= 0 || !d.has(Seed000) {
		return 0, nil
	}
	rels := []string{d.tree.BestEffort, d.tree.Burstable}
	for _, p := range d.vms {
		rels = append(rels, p.rel)
	}
	var weights []uint64
	for _, rel := range rels {
		w, err := d.weight(rel)
		if err != nil {
			return 0, err
		}
		weights = append(weights, w)
	}
	return repayTime(excess, weights), nil
}

// repayTime: see repayWait.
func repayTime(excess float64, weights []uint64) time.Duration {
	lo, hi := slices.Min(weights), slices.Max(weights)
	if excess <= 0 || lo == 0 {
		return 0
	}
	return min(time.Duration(excess*float64(hi)/float64(lo)*float64(time.Second)), maxRepay)
}

// maxRepay bounds repayWait: past it the demo measures anyway, and a
// window still over the slack is measured again, up to windows times.
const maxRepay = 30 * time.Second

// freeze stops (or continues) every burner.
func (d *run) freeze(stop bool) {
	for _, c := range d.children {
		if c.role == roleBurn {
			pause(c, stop)
		}
	}
}

// figures turns two readings into a phase's figures (cores: CPU seconds
// per second of wall time between a counter's two reads).
func (d *run) figures(ph Phase, a, b reading, ctrRel string) Phase {
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return ph
	}
	ph.Seconds = wall
	cores := func(x, y sample) float64 {
		if s := y.at.Sub(x.at).Seconds(); s > 0 {
			return (y.sec - x.sec) / s
		}
		return 0
	}
	if d.has(Seed000) {
		sp := &Split{BurstableCores: cores(a.burst, b.burst)}
		var vmTotal, sizeTotal float64
		for i, p := range d.vms {
			c := cores(a.vms[i], b.vms[i])
			sp.VMs = append(sp.VMs, VMFigure{Name: p.Name, SizeCores: float64(p.MilliCPU) / 1000, Cores: c})
			vmTotal += c
			sizeTotal += float64(p.MilliCPU) / 1000
		}
		if all := vmTotal + sp.BurstableCores; all > 0 {
			sp.VMShare = vmTotal / all
		}
		for i := range sp.VMs {
			v := &sp.VMs[i]
			// What the sizes call for does not depend on what the pods got.
			if sizeTotal > 0 {
				v.ShareBySize = v.SizeCores / sizeTotal
			}
			v.ShareEqual = 1 / float64(len(sp.VMs))
			if vmTotal > 0 {
				v.ShareOfVMs = v.Cores / vmTotal
				if v.ShareBySize > 0 {
					v.PerSize = v.ShareOfVMs / v.ShareBySize
				}
				v.PerEqual = v.ShareOfVMs / v.ShareEqual
			}
		}
		ph.Seed000 = sp
	}
	if d.has(Seed003) && !ph.BurstablePaused {
		ph.Seed003 = &Placement{PodCores: cores(a.pod, b.pod), ContainerCores: cores(a.ctr, b.ctr),
			ContainerCgroup: d.s.cgroup(ctrRel), MisplacedCgroup: d.s.cgroup(d.mis.ctrRel),
			MisplacedCores: cores(a.misplaced, b.misplaced), Misplaced: path.Clean(ctrRel) == path.Clean(d.mis.ctrRel)}
	}
	return ph
}

// weights adds the weights in force and what they promise, and seed
// 003's memory and process counts, to a measured phase.
func (d *run) weights(ph *Phase) error {
	var err error
	if sp := ph.Seed000; sp != nil {
		if sp.TierWeight, err = d.weight(d.tree.BestEffort); err != nil {
			return err
		}
		if sp.BurstableTierWeight, err = d.weight(d.tree.Burstable); err != nil {
			return err
		}
		sp.PromisedVMShare = float64(sp.TierWeight) / float64(sp.TierWeight+sp.BurstableTierWeight)
		if ph.BurstablePaused {
			sp.PromisedVMShare = 1
		}
		for i, p := range d.vms {
			if sp.VMs[i].PodWeight, err = d.weight(p.rel); err != nil {
				return err
			}
		}
	}
	if pl := ph.Seed003; pl != nil {
		if pl.PodMemoryBytes, err = d.s.memoryBytes(d.mis.rel); err != nil {
			return err
		}
		if pl.MisplacedMemoryBytes, err = d.s.memoryBytes(d.mis.ctrRel); err != nil {
			return err
		}
		for _, p := range d.s.points {
			if n := len(d.s.pidsAt(p, d.mis.ctrRel)); n > pl.MisplacedProcs {
				pl.MisplacedProcs = n
			}
		}
	}
	return nil
}
