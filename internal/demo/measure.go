package demo

import (
	"context"
	"fmt"
	"math"
	"os"
	"path"
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
	due, err := d.entitlement(pauseBurst)
	if err != nil {
		return ph, nil, err
	}
	// A phase takes at most maxExtra longer than it would with sound
	// counters, whatever the scheduler charges.
	deadline := time.Now().Add(settle + d.o.Duration + maxExtra)
	base, settleFor := ph, settle
	for try := 1; ; try++ {
		a, b, late, err := d.window(ctx, base, ctrRel, due, settleFor, deadline)
		if err != nil {
			return ph, nil, err
		}
		ph = d.figures(base, a, b, ctrRel)
		busiest := d.busiestCPU(ph)
		over := busiest > 1+overcountSlack
		if !over && late.seconds == 0 {
			break
		}
		if over && try == windows {
			return ph, nil, fmt.Errorf("%s: the kernel counted %.2f CPU seconds per second of wall time on one CPU in each of %d windows: the counters and the clock disagree (the demo kept off the CPU, or an emulated machine's clock?)", name, busiest, windows)
		}
		why, excess, repaid := late.String(), late.seconds, late.repaid
		if over {
			excess = (busiest - 1) * ph.Seconds
			why = fmt.Sprintf("the kernel counted %.2f CPU seconds per second of wall time on one CPU, more than it has", busiest)
			repaid = time.Now().Add(repayTime(excess, due.lightest()))
		}
		settleFor = settle + time.Until(repaid)
		if !over && (try == windows || time.Now().Add(settleFor+d.o.Duration).After(deadline)) {
			d.say("%s: %s, and the time to measure again after it is taken back is up: these figures include it", name, why)
			break
		}
		settleFor = min(settleFor, max(settle, time.Until(deadline)-d.o.Duration))
		d.say("%s: %s; measuring again after %.1f s, while the scheduler takes back the %.2f s it over-charged", name, why, settleFor.Seconds(), excess)
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

// window lets the burners run for settleFor, then reads the counters for
// the phase's duration, showing the figures so far every half second.
//
// It reads them every half second while the burners settle too, and
// looks for over-charges (see overCharged) in each half second. One seen
// while they settle is waited out there, until the scheduler has taken it
// back (no later than the deadline leaves time for the window). It
// returns the over-charge that bends the window's figures, if any: one
// from before the window not yet taken back when the window opened, or
// one in the window not taken back by its end (one the window holds
// whole, charge and taking back, leaves the figures sound), the one
// taken back last.
func (d *run) window(ctx context.Context, ph Phase, ctrRel string, due entitled, settleFor time.Duration, deadline time.Time) (a, b reading, late charge, err error) {
	// next sleeps half a second, or until until, and reads the counters;
	// ok is false once until has passed.
	next := func(until time.Time) (r reading, ok bool, err error) {
		wait := time.Until(until)
		if wait <= 0 {
			return r, false, nil
		}
		if err := sleep(ctx, min(wait, 500*time.Millisecond)); err != nil {
			return r, false, err
		}
		r, err = d.read(ctrRel)
		return r, err == nil, err
	}
	if a, err = d.read(ctrRel); err != nil {
		return a, b, late, err
	}
	var before, in []charge
	settled, latest := a.at.Add(settleFor), deadline.Add(-d.o.Duration)
	for prev := a; ; prev = a {
		var ok bool
		if a, ok, err = next(settled); !ok {
			if err != nil {
				return a, b, late, err
			}
			a = prev
			break
		}
		if c := d.overCharged(prev, a, due); c.seconds > 0 {
			before = append(before, c)
			if t := c.repaid.Add(settle); t.After(settled) {
				settled = t
				if settled.After(latest) {
					settled = latest
				}
				d.say("%s: %s; letting the burners run %.1f s more, while the scheduler takes it back", ph.Name, c, time.Until(settled).Seconds())
			}
		}
	}
	end := a.at.Add(d.o.Duration)
	d.progressStart(ph.Name)
	defer d.progressEnd()
	// The last read is at end or after it: it closes the window.
	for prev := a; ; prev = b {
		var ok bool
		if b, ok, err = next(end); !ok {
			if err != nil {
				return a, b, late, err
			}
			b = prev
			break
		}
		if c := d.overCharged(prev, b, due); c.seconds > 0 {
			in = append(in, c)
		}
		d.progress(ph.Name, d.figures(ph, a, b, ctrRel))
	}
	return a, b, bending(before, in, a.at, b.at), nil
}

// bending is the over-charge that bends the figures of a window from
// opened to closed (see window): of those seen before it, one not taken
// back when it opened; of those in it, one not taken back when it closed;
// the one taken back last.
func bending(before, in []charge, opened, closed time.Time) charge {
	var late charge
	for _, cs := range []struct {
		charges []charge
		by      time.Time
	}{{before, opened}, {in, closed}} {
		for _, c := range cs.charges {
			if c.repaid.After(cs.by) && c.repaid.After(late.repaid) {
				late = c
			}
		}
	}
	return late
}

// entitled is what seed 000's cgroups may get of their CPU by the
// weights in force: each VM pod its part of the BestEffort tier's part,
// and the Burstable pod its tier's (none while it is paused).
type entitled struct {
	vms   []float64
	burst float64
}

// lightest is the smallest share, what a charge no one cgroup can be
// blamed for is taken back at.
func (e entitled) lightest() float64 {
	least := e.burst
	for _, s := range e.vms {
		if least == 0 || s < least {
			least = s
		}
	}
	return least
}

// entitlement reads the weights a phase runs under.
func (d *run) entitlement(burstPaused bool) (entitled, error) {
	var e entitled
	if !d.has(Seed000) {
		return e, nil
	}
	rels := []string{d.tree.BestEffort, d.tree.Burstable}
	for _, p := range d.vms {
		rels = append(rels, p.rel)
	}
	var weights []uint64
	for _, rel := range rels {
		w, err := d.weight(rel)
		if err != nil {
			return e, err
		}
		weights = append(weights, w)
	}
	return entitledBy(weights, burstPaused), nil
}

// entitledBy: see entitlement; weights are the BestEffort tier's, the
// Burstable tier's, then the VM pods'.
func entitledBy(weights []uint64, burstPaused bool) entitled {
	var e entitled
	tier, burst, pods := float64(weights[0]), float64(weights[1]), weights[2:]
	tierShare := 1.0
	if !burstPaused {
		tierShare, e.burst = tier/(tier+burst), burst/(tier+burst)
	}
	var podSum float64
	for _, w := range pods {
		podSum += float64(w)
	}
	for _, w := range pods {
		e.vms = append(e.vms, tierShare*float64(w)/podSum)
	}
	return e
}

// charge is a cgroup the scheduler charged more CPU than its weight gives
// it: seconds beyond its share, in the interval between two reads that
// ended at; repaid is when the scheduler will have taken them back.
type charge struct {
	cgroup  string
	seconds float64
	within  time.Duration
	repaid  time.Time
}

func (c charge) String() string {
	return fmt.Sprintf("the scheduler charged %s %.2f s more than its weight gives it in %.1f s (a stalled emulated CPU?)", c.cgroup, c.seconds, c.within.Seconds())
}

// overCharged is the largest over-charge between two reads: a seed-000
// cgroup that got more than chargeSlack times its share of the interval
// and chargeGrace besides, by what it got beyond its share.
//
// The scheduler charges the CPU time it sees pass to the task that has
// the CPU; when an emulated CPU stalls (its host thread kept off the
// host's CPU), the stall is charged too. It keeps what it charged: a
// weight-1 VM pod charged 0.2 s beside a Burstable tier at 20 is given
// nothing until that tier has run 20 × 0.2 s. CI's v2 guest showed both:
// one window in which the VM pods got 12.6% of the CPU for their 4.8%,
// and windows after a charge in which they got 0.0% and 1.5%. With seed
// 003's burner on the same CPU (a machine with one CPU) the shares are
// not known, and nothing is checked.
func (d *run) overCharged(x, y reading, due entitled) charge {
	var worst charge
	if !d.has(Seed000) || d.cpuVM == d.cpuMis {
		return worst
	}
	check := func(name string, a, b sample, share float64) {
		dt := b.at.Sub(a.at)
		got, fair := b.sec-a.sec, share*dt.Seconds()
		if dt > 0 && share > 0 && got > chargeSlack*fair+chargeGrace.Seconds() {
			c := charge{cgroup: name, seconds: got - fair, within: dt, repaid: b.at.Add(repayTime(got-fair, share))}
			if c.repaid.After(worst.repaid) {
				worst = c
			}
		}
	}
	for i, share := range due.vms {
		check(d.vms[i].Name, x.vms[i], y.vms[i], share)
	}
	check(d.burst.Name, x.burst, y.burst, due.burst)
	return worst
}

// What a cgroup may get beyond its share of an interval before it counts
// as over-charged: CFS runs even a weight-1 task for a slice of a few
// milliseconds when its turn comes.
const (
	chargeSlack = 1.5
	chargeGrace = 25 * time.Millisecond
)

// busiestCPU is the most CPU seconds per wall second a phase's figures
// put on one CPU: seed 000's burners share one, seed 003's burner has
// the other (or the same one, on a machine with one CPU).
func (d *run) busiestCPU(ph Phase) float64 {
	var vmCPU, misCPU float64
	if sp := ph.Seed000; sp != nil {
		vmCPU = sp.BurstableCores
		for _, v := range sp.VMs {
			vmCPU += v.Cores
		}
	}
	if p := ph.Seed003; p != nil {
		misCPU = p.ContainerCores
	}
	if d.cpuVM == d.cpuMis {
		return vmCPU + misCPU
	}
	return max(vmCPU, misCPU)
}

// repayTime is how long a cgroup whose share of the CPU is share gets
// none of it after the scheduler charged it excess seconds it did not
// run: its virtual runtime is excess/share ahead, and the others, with
// all the CPU, catch up in excess × (1 − share) / share seconds.
func repayTime(excess, share float64) time.Duration {
	if excess <= 0 || share <= 0 || share >= 1 {
		return 0
	}
	return time.Duration(excess * (1 - share) / share * float64(time.Second))
}

// maxExtra bounds how much longer than its duration a phase runs to wait
// out what the scheduler over-charged: past it, the demo keeps the window
// it has and says the figures include the charge (and a window whose
// counters exceed the wall time is measured again, up to windows times).
const maxExtra = 12 * time.Second

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
