package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/kubelettree"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// Seeds the demo knows.
const (
	Seed000 = "000"
	Seed003 = "003"
)

// Options configure a run.
type Options struct {
	// Seeds are the layouts to build: Seed000, Seed003 or both.
	Seeds []string
	// Driver names the kubelet tree as the cgroupfs (default) or the
	// systemd cgroup driver does.
	Driver string
	// Duration is how long each phase measures.
	Duration time.Duration
	// Self is the cgwarden binary the demo re-executes for its children
	// (os.Executable()).
	Self string
	// Progress, when set, receives what the demo does as it does it;
	// Live rewrites a status line in place (a terminal).
	Progress io.Writer
	Live     bool
	Log      *slog.Logger
	// failAfter, when set, makes the run fail after that step (tests).
	failAfter string
}

// ParseSeeds reads --seed: 000, 003 or all.
func ParseSeeds(s string) ([]string, error) {
	switch s {
	case Seed000, Seed003:
		return []string{s}, nil
	case "all", "":
		return []string{Seed000, Seed003}, nil
	}
	return nil, fmt.Errorf("--seed %q: want 000, 003 or all", s)
}

// ErrNotRoot is returned when the demo is not run as root.
var ErrNotRoot = errors.New("cgwarden demo creates cgroups and moves processes on the live kernel, which needs root: run it with sudo (it touches nothing outside its own scratch cgroup, and removes it when done)")

// run is one demo in progress.
type run struct {
	o        Options
	s        *scratch
	children []*child
	res      *Result
	tree     kubelettree.Tree
	vms      []Pod
	burst    Pod
	burstPID *child
	mis      Pod
	misBurn  *child
	meta     *metadata.Set
	cpuVM    int // the CPU seed 000's burners share
	cpuMis   int // seed 003's burner's
}

// Run builds the layouts, measures, audits, fixes, measures, reverts and
// removes everything it created, whatever happens; ctx cancelled (a
// signal) ends it early, still cleaning up. The result holds what was
// measured up to the end or the failure.
func Run(ctx context.Context, o Options) (res *Result, err error) {
	nm, err := kubelettree.NamesFor(layout.Driver(o.Driver))
	if err != nil {
		return nil, fmt.Errorf("--driver: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default().With("component", "demo")
	}
	if o.Self == "" {
		if o.Self, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding cgwarden's own binary for the demo's processes: %w", err)
		}
	}
	s, err := newScratch()
	if err != nil {
		return nil, fmt.Errorf("creating the scratch cgroup: %w", err)
	}
	tree := kubelettree.Tree{Names: nm, V2: s.v2, C: treeCgroups{s}}
	d := &run{o: o, s: s, tree: tree, res: &Result{Scratch: s.name, CgroupVersion: s.version(), CPUs: runtime.NumCPU(), Driver: string(nm.Driver),
		Seeds: o.Seeds, PhaseSeconds: o.Duration.Seconds()}}
	for _, n := range s.swept {
		d.say("removed %s, the scratch cgroup of an earlier demo that was killed before its cleanup", n)
	}
	if s.sweepErr != nil {
		d.say("warning: %v", s.sweepErr)
	}
	if runtime.NumCPU() > 1 {
		d.cpuMis = 1
	}
	journalDir, err := os.MkdirTemp("", "cgwarden-demo-journal-")
	if err != nil {
		_ = s.remove()
		return nil, fmt.Errorf("journal directory: %w", err)
	}
	defer func() {
		d.say("removing the scratch cgroup %s and the demo's processes", s.name)
		cerr := d.cleanup()
		_ = os.RemoveAll(journalDir)
		d.res.Removed = cerr == nil && !d.scratchExists()
		if cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up: %w", cerr))
		}
		res = d.res
	}()
	// The engine's notes (a write the kernel refused, as
	// memory.move_charge_at_immigrate on Linux 6.13 and later) are in the
	// result's fix steps; only its warnings interrupt the demo's lines.
	eng := &fix.Engine{FS: s.host, Base: s.name, JournalDir: journalDir, Log: o.Log}
	if o.Progress != nil {
		eng.Log = slog.New(slog.NewTextHandler(o.Progress, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "fix")
	}
	return d.res, d.steps(ctx, eng)
}

func (s *scratch) version() string {
	if s.v2 {
		return "v2"
	}
	return "v1"
}

func (d *run) has(seed string) bool { return slices.Contains(d.o.Seeds, seed) }

func (d *run) check(ctx context.Context, step string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted before %s: %w", step, context.Cause(ctx))
	}
	if d.o.failAfter == step {
		return fmt.Errorf("failing after %s, as the test asked", step)
	}
	return nil
}

func (d *run) steps(ctx context.Context, eng *fix.Engine) error {
	d.say("building the layouts in the scratch cgroup %s (cgroup %s, %s driver's names)", d.s.name, d.s.version(), d.tree.Driver)
	if err := d.build(); err != nil {
		return fmt.Errorf("building the layouts: %w", err)
	}
	eng.Meta = d.meta
	if err := d.check(ctx, "build"); err != nil {
		return err
	}
	before, n, err := d.measure(ctx, PhaseBefore, false)
	if err != nil {
		return err
	}
	d.res.Phases = append(d.res.Phases, before)
	if d.has(Seed000) {
		// The VM pods' sliver is a few scheduler ticks, too few to tell a
		// split: with the Burstable pod stopped the tier gets the CPU,
		// and the pods split it equally whatever their sizes.
		paused, _, err := d.measure(ctx, PhasePaused, true)
		if err != nil {
			return err
		}
		d.res.Phases = append(d.res.Phases, paused)
	}
	d.say("auditing the scratch")
	r := audit.Run(&audit.Input{Node: n, Meta: d.meta})
	d.res.FindingsBefore = r.Findings
	d.res.nodeBefore = n
	if err := d.check(ctx, "audit"); err != nil {
		return err
	}
	switch {
	case d.has(Seed000) && d.has(Seed003):
		d.say("applying the fix: weights by size (the tier capped at %d m, the VM pods' sizes) and adoption of the misplaced container", d.maxTier())
	case d.has(Seed000):
		d.say("applying the fix: weights by size (the tier capped at %d m, the VM pods' sizes)", d.maxTier())
	default:
		d.say("applying the fix: adoption of the misplaced container")
	}
	fr, err := eng.Apply(fix.Options{MaxTierMilliCPU: d.maxTier()})
	if fr != nil {
		for _, st := range fr.Steps {
			d.res.Fix = append(d.res.Fix, FixStep{Description: st.Op.Description, Rule: st.Op.Rule, Note: st.Note, Moved: len(st.Moved)})
		}
	}
	if err != nil {
		return fmt.Errorf("applying the fix: %w", err)
	}
	if err := d.check(ctx, "fix"); err != nil {
		return err
	}
	after, n2, err := d.measure(ctx, PhaseAfter, false)
	if err != nil {
		return err
	}
	d.res.Phases = append(d.res.Phases, after)
	d.res.FindingsAfter = audit.Run(&audit.Input{Node: n2, Meta: d.meta}).Findings
	d.res.nodeAfter = n2
	d.say("reverting the fix")
	rep, err := eng.Revert(true)
	if err != nil {
		return fmt.Errorf("reverting the fix: %w", err)
	}
	d.res.Revert.Undone = len(rep.Undos) - len(rep.Failed())
	for _, u := range rep.Failed() {
		d.res.Revert.Failed = append(d.res.Revert.Failed, u.Op.Description+": "+u.Note)
	}
	if len(rep.Failed()) > 0 {
		return fmt.Errorf("revert left %d operations undone", len(rep.Failed()))
	}
	return nil
}

// maxTier is the tier cap of the weights fix: the sum of the VM sizes,
// as on a node with CPUs enough for them (this one may have fewer).
func (d *run) maxTier() int64 {
	var sum int64
	for _, p := range d.vms {
		sum += p.MilliCPU
	}
	return sum
}

func (d *run) build() error {
	if err := d.tree.BuildKube(burstMilli); err != nil {
		return err
	}
	var others []Pod
	if d.has(Seed000) {
		var err error
		if d.burst, err = newPod(d.tree.Names, "app", layout.Burstable, burstMilli); err != nil {
			return err
		}
		if err := d.tree.BuildPod(d.burst.treePod(), fairness.MilliCPUToShares(burstMilli)); err != nil {
			return err
		}
		others = append(others, d.burst)
		for _, m := range vmSizes {
			p, err := newPod(d.tree.Names, fmt.Sprintf("vm-%d-cpu", m/1000), layout.BestEffort, m)
			if err != nil {
				return err
			}
			if err := d.tree.BuildPod(p.treePod(), fairness.MinShares); err != nil {
				return err
			}
			d.vms = append(d.vms, p)
		}
	}
	if d.has(Seed003) {
		var err error
		if d.mis, err = newPod(d.tree.Names, "spin-app", layout.Guaranteed, misplacedMilli); err != nil {
			return err
		}
		d.mis.ctrRel = misplacedRel(d.mis)
		if err := d.s.mkdir(d.mis.rel); err != nil {
			return err
		}
		if err := d.tree.SetWeight(d.mis.rel, d.tree.PodWeight(fairness.MilliCPUToShares(misplacedMilli))); err != nil {
			return err
		}
		if err := d.s.mkdir(d.mis.ctrRel); err != nil {
			return err
		}
		others = append(others, d.mis)
	}
	d.meta = metadataOf(d.vms, others...)
	d.res.meta = d.meta
	for _, p := range append(slices.Clone(d.vms), others...) {
		p.Cgroup, p.Container = d.s.cgroup(p.rel), d.s.cgroup(p.ctrRel)
		d.res.Pods = append(d.res.Pods, p)
	}
	// Burners: seed 000's all on one CPU, so that every pod wants a whole
	// CPU and they share one; seed 003's on another when there is one.
	if d.has(Seed000) {
		c, err := d.startChild(roleBurn, d.burst.ctrRel, d.cpuVM)
		if err != nil {
			return err
		}
		d.burstPID = c
		for _, p := range d.vms {
			if _, err := d.startChild(roleBurn, p.ctrRel, d.cpuVM); err != nil {
				return err
			}
		}
	}
	if d.has(Seed003) {
		c, err := d.startChild(roleBurn, d.mis.ctrRel, d.cpuMis)
		if err != nil {
			return err
		}
		d.misBurn = c
		if _, err := d.startChild(roleMem, d.mis.ctrRel, d.cpuMis); err != nil {
			return err
		}
	}
	return nil
}

// cleanup ends the children, newest first (a starved child needs CPU to
// exit, which it gets once its busy siblings are gone), then removes the
// scratch with whatever the fix left in it.
func (d *run) cleanup() error {
	for _, c := range slices.Backward(d.children) {
		_ = c.cmd.Process.Kill()
	}
	for _, c := range d.children {
		_ = c.cmd.Wait()
	}
	return d.s.remove()
}

func (d *run) scratchExists() bool {
	for _, p := range d.s.points {
		if _, err := os.Stat(d.s.at(p, "")); err == nil {
			return true
		}
	}
	return false
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}
}

// pause stops (or continues) a child.
func pause(c *child, stop bool) {
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	_ = c.cmd.Process.Signal(sig)
}

// scan takes the scratch's picture as a node.
func (d *run) scan() (*inventory.Node, *inventory.Scanner, error) {
	sc, err := inventory.Open(d.s.host)
	if err != nil {
		return nil, nil, err
	}
	sc.Base = d.s.name
	sc.Meta = d.meta
	n, err := sc.Scan(time.Now())
	if err != nil {
		return nil, nil, fmt.Errorf("scanning the scratch: %w", err)
	}
	return n, sc, nil
}
