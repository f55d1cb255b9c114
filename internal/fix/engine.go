package fix

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/failpoint"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/procid"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

// Stage is a point of an apply where the Hook is called.
type Stage string

const (
	// StageIntent: the intent of operation Op is journaled, the operation
	// is not applied yet.
	StageIntent Stage = "after-intent"
	// StageApplied: operation Op is applied, its outcome not journaled.
	StageApplied Stage = "after-apply"
	// StageMovePid: a move is about to write Pid into its target.
	StageMovePid Stage = "before-move-pid"
	// StageMoveRound: a move finished one pass over its sources.
	StageMoveRound Stage = "after-move-round"
	// StageUndoPid: a revert is about to move Pid back into its source.
	StageUndoPid Stage = "before-undo-pid"
)

// Hook is called at the stages above with the operation's index (0-based)
// and, for StageMovePid, the process. Tests inject one to stop, crash or
// disturb an apply between two steps; nil in production.
type Hook func(stage Stage, op int, pid int)

// ReadWriter is what the engine needs of the cgroup filesystem door.
type ReadWriter interface {
	cgroupfs.FS
	cgroupfs.Writer
}

// granter is the door's scoped writers (cgroupfs.Host.Grant): an apply
// writes through a grant bound to its policy's paths, so a write the
// policy would refuse is refused twice, and nothing outlives the apply.
type granter interface {
	Grant(trees, exact []string) *cgroupfs.Grant
}

// UnitDoor is systemd on a node it runs (systemd.Bus), the second door:
// the weight plan asks it which cgroups are its units and what their
// weight properties hold, and an apply sets them through a grant bound to
// the units its checked plan names.
type UnitDoor interface {
	plan.Units
	Grant(units []string) *systemd.Grant
	GrantScopes(scopes []systemd.Scope) *systemd.Grant
}

// writer is what an apply writes through: a grant of the door bound to
// pol (ended by the returned func), or the FS itself when it grants
// nothing (a test's fake).
func (e *Engine) writer(trees, exact []string) (cgroupfs.Writer, func()) {
	if g, ok := e.FS.(granter); ok {
		gr := g.Grant(trees, exact)
		return gr, gr.End
	}
	return e.FS, func() {}
}

// Engine applies and reverts plans on one node.
type Engine struct {
	// FS reads and writes the node's cgroups (and /proc).
	FS ReadWriter
	// Base is the cgroup the scan starts from ("/" for the whole node),
	// as inventory.Scanner.Base.
	Base string
	// JournalDir holds the journal and its lock.
	JournalDir string
	// Journal, when set, is the journal of JournalDir shared with the
	// process's other engines (serve's adopter and weight holder): its
	// Lock makes them wait for each other instead of failing. Nil: the
	// engine keeps its own, made on first use and closed by Close.
	Journal *journal.Journal
	own     *journal.Journal
	// Units is systemd on a node it runs (systemd.Detect), nil on any
	// other: the weights of its units are then set as unit properties
	// (plan.Property), which systemd keeps across daemon-reload.
	Units UnitDoor
	// Meta names pods for --pod NAME; may be nil.
	Meta *metadata.Set
	Log  *slog.Logger
	Hook Hook
	// By names the command in the journal's runs (journal.ByFix,
	// journal.ByServe): a holder that lowers a weight `fix --apply` set
	// says so.
	By string
	// Evidence confirms each misplaced container by what its runtime
	// did before it is adopted (plan.Input.Evidence); nil only for a
	// snapshot's dry run or a test's fake tree.
	Evidence plan.Evidence
}

// Close releases the engine's own journal.
func (e *Engine) Close() error {
	if e.own == nil {
		return nil
	}
	err := e.own.Close()
	e.own = nil
	return err
}

// journal is the shared journal, or the engine's own. Kept between calls,
// it reads only what was appended since its last read.
func (e *Engine) journal() *journal.Journal {
	if e.Journal != nil {
		return e.Journal
	}
	if e.own == nil {
		e.own = journal.New(e.JournalDir)
	}
	return e.own
}

// locked runs f with the journal locked, then compacts the journal if it
// has grown past its bound (journal.Journal.Oversized), dropping the steps
// whose cgroups are gone. A compaction that fails leaves the journal as it
// was and only warns: the run it follows is recorded whole.
func (e *Engine) locked(f func(j *journal.Journal) error) error {
	j := e.journal()
	if err := j.Lock(); err != nil {
		return err
	}
	defer j.Unlock()
	err := f(j)
	if cerr := j.CompactIfLarge(e.gone); cerr != nil {
		e.log().Warn("compacting the journal", "err", cerr)
	}
	return err
}

// JournalEntries returns the journal's entries as they are now, without
// its file lock (see journal.Journal.Snapshot).
func (e *Engine) JournalEntries() ([]journal.Entry, error) {
	return e.journal().Snapshot()
}

// gone reports whether a revert could do nothing about s any more, because
// the cgroup it changed was removed (its pod deleted; the kubelet removes a
// pod's cgroup with the children cgwarden made in it): a write whose file
// is gone, a mkdir whose directory is gone, a move whose targets are all
// gone (a cgroup with processes cannot be removed), an rmdir whose parent
// is gone. Paths are never reused: pod cgroups are named by UID, container
// cgroups by ID.
func (e *Engine) gone(s *journal.Step) bool {
	missing := func(dir string) bool {
		_, err := e.FS.ReadDirs(dir)
		return errors.Is(err, fs.ErrNotExist)
	}
	switch s.Op.Kind {
	case plan.Write, plan.Property:
		_, err := e.FS.ReadFile(s.Op.Path)
		return errors.Is(err, fs.ErrNotExist)
	case plan.Mkdir:
		return missing(s.Op.Path)
	case plan.Move:
		for _, pr := range s.Op.Pairs {
			if !missing(pr.Target) {
				return false
			}
		}
		return len(s.Op.Pairs) > 0
	case plan.Rmdir:
		return missing(path.Dir(s.Op.Path))
	}
	return false
}

// Options narrow a fix.
type Options struct {
	// Pod is a pod UID, name or namespace/name.
	Pod string
	// Only lists the rules to repair (empty: every rule fix knows).
	Only []string
	// MaxTierMilliCPU caps the sizes the BestEffort tier's weight counts
	// (0: the node's CPUs); see plan.WeightInput.
	MaxTierMilliCPU int64
	// RemoveEmptySource removes the runtime's emptied cgroup.
	RemoveEmptySource bool
}

// MaxMoveRounds bounds the passes of a move: a source that still gets new
// processes after this many passes is being refilled by its runtime.
const MaxMoveRounds = 100

// mover is how a move puts one process into its target: a write of its
// PID to the target's cgroup.procs, or, for a move into a systemd scope
// (plan.Op.Scope), systemd starting the scope with the first process and
// attaching the rest (the scope exists already when an interrupted move
// started it). end revokes what it was granted.
func (e *Engine) mover(w *guard, op plan.Op) (put func(target string, pid int) error, end func(), err error) {
	if op.Scope == nil {
		return func(target string, pid int) error {
			return w.WriteFile(path.Join(target, "cgroup.procs"), []byte(strconv.Itoa(pid)))
		}, func() {}, nil
	}
	sc := *op.Scope
	if e.Units == nil {
		return nil, nil, fmt.Errorf("the plan moves processes into systemd scope %s, but cgwarden has no connection to systemd: nothing moved", sc.Unit)
	}
	g := e.Units.GrantScopes([]systemd.Scope{sc})
	_, err = e.FS.ReadDirs(op.Pairs[0].Target)
	started := err == nil
	return func(_ string, pid int) error {
		if started {
			return g.Attach(sc.Unit, []int{pid})
		}
		if err := g.StartScope(sc, []int{pid}); err != nil {
			return err
		}
		started = true
		return nil
	}, g.End, nil
}

// units is e.Units as the plan takes it: a nil interface when unset.
func (e *Engine) units() plan.Units {
	if e.Units == nil {
		return nil
	}
	return e.Units
}

// unitWriter is the grant an apply sets unit properties through, bound
// to the units its Property operations name (nil when there are none).
func (e *Engine) unitWriter(ops []plan.Op) (*systemd.Grant, error) {
	var units []string
	for _, op := range ops {
		if op.Kind == plan.Property {
			units = appendUniq(units, op.Unit)
		}
	}
	if len(units) == 0 {
		return nil, nil
	}
	if e.Units == nil {
		return nil, fmt.Errorf("the plan sets properties of systemd units %v, but cgwarden has no connection to systemd: nothing applied", units)
	}
	return e.Units.Grant(units), nil
}

func (e *Engine) log() *slog.Logger {
	if e.Log == nil {
		return slog.Default().With("component", "fix")
	}
	return e.Log
}

func (e *Engine) hook(s Stage, op, pid int) {
	if e.Hook != nil {
		e.Hook(s, op, pid)
	}
}

// Plan scans the node and plans, without changing anything (the journal
// is read, not locked).
func (e *Engine) Plan(o Options) (*plan.Plan, plan.Policy, error) {
	entries, err := e.JournalEntries()
	if err != nil {
		return nil, plan.Policy{}, err
	}
	return e.plan(o, journal.Owned(journal.Applies(entries)))
}

func (e *Engine) plan(o Options, owned []string) (*plan.Plan, plan.Policy, error) {
	sc, err := inventory.Open(e.FS)
	if err != nil {
		return nil, plan.Policy{}, err
	}
	if e.Base != "" {
		sc.Base = e.Base
	}
	sc.Meta = e.Meta
	n, err := sc.Scan(time.Now())
	if err != nil {
		return nil, plan.Policy{}, err
	}
	return e.planNode(n, sc.Places, o, owned)
}

// planNode plans from a scan made elsewhere.
func (e *Engine) planNode(n *inventory.Node, places mounts.Places, o Options, owned []string) (*plan.Plan, plan.Policy, error) {
	return Plan(plan.Input{
		Node: n, Places: places, FS: e.FS, Pod: o.Pod, Only: o.Only, RemoveEmptySource: o.RemoveEmptySource, Units: e.units(), Evidence: e.Evidence,
		Owned: func(p string) bool { return slices.Contains(owned, path.Clean(p)) },
	}, e.Meta, o.MaxTierMilliCPU)
}

// Plan is the whole repair of one scan: the adoption of misplaced
// containers, then the weights of sized BestEffort pods, under one policy.
func Plan(in plan.Input, meta *metadata.Set, maxTierMilli int64) (*plan.Plan, plan.Policy, error) {
	p, pol, err := plan.Adopt(in)
	if err != nil {
		return nil, pol, err
	}
	wp, wpol, err := plan.Weights(plan.WeightInput{Node: in.Node, Places: in.Places, FS: in.FS, Meta: meta,
		Pod: in.Pod, Only: in.Only, MaxTierMilliCPU: maxTierMilli, Units: in.Units})
	if err != nil {
		return nil, pol, err
	}
	p.Ops = append(p.Ops, wp.Ops...)
	for _, n := range wp.Notes {
		p.Notes = appendUniq(p.Notes, n)
	}
	p.Skipped = append(p.Skipped, wp.Skipped...)
	p.Targets = wp.Targets
	pol.Merge(wpol)
	return p, pol, nil
}

// StepResult is what happened to one operation.
type StepResult struct {
	Op plan.Op `json:"op"`
	// Moved and Exited are the processes a move moved, and those that
	// exited before they could be.
	Moved  []int  `json:"moved,omitempty"`
	Exited []int  `json:"exited,omitempty"`
	Note   string `json:"note,omitempty"`
}

// Result is what an apply did.
type Result struct {
	Plan *plan.Plan `json:"plan"`
	// Run is the journal's run ID ("" when there was nothing to do).
	Run     string       `json:"run,omitempty"`
	Resumed bool         `json:"resumed,omitempty"`
	Steps   []StepResult `json:"steps"`
}

// Apply locks the journal, plans and applies. On error the result holds
// what was applied before it.
func (e *Engine) Apply(o Options) (*Result, error) {
	return e.lockedApply(func(owned []string) (*plan.Plan, plan.Policy, error) { return e.plan(o, owned) })
}

// ApplyScan locks the journal, plans from a scan made elsewhere (the node
// loop's, named with e.Meta) and applies, as Apply does with its own scan.
func (e *Engine) ApplyScan(n *inventory.Node, places mounts.Places, o Options) (*Result, error) {
	return e.lockedApply(func(owned []string) (*plan.Plan, plan.Policy, error) { return e.planNode(n, places, o, owned) })
}

// ApplyPlan locks the journal and applies a plan made elsewhere (the
// weight holder's), under its policy, exactly as Apply applies its own.
func (e *Engine) ApplyPlan(p *plan.Plan, pol plan.Policy) (*Result, error) {
	return e.lockedApply(func([]string) (*plan.Plan, plan.Policy, error) { return p, pol, nil })
}

// lockedApply locks the journal, plans with mk (given the cgroups the
// journal says cgwarden owns) and applies the plan.
func (e *Engine) lockedApply(mk func(owned []string) (*plan.Plan, plan.Policy, error)) (res *Result, err error) {
	err = e.locked(func(j *journal.Journal) error {
		runs := journal.Applies(j.Entries())
		p, pol, err := mk(journal.Owned(runs))
		if err != nil {
			return err
		}
		res, err = e.applyPlan(j, runs, p, pol)
		return err
	})
	return res, err
}

func (e *Engine) applyPlan(j *journal.Journal, runs []*journal.Run, p *plan.Plan, pol plan.Policy) (*Result, error) {
	res := &Result{Plan: p, Steps: []StepResult{}}
	if err := pol.CheckAll(p.Ops); err != nil {
		return res, err
	}
	unfinished := journal.Unfinished(runs)
	if len(p.Ops) == 0 && unfinished == nil {
		return res, nil
	}
	var exact []string
	if pol.RemoveSources {
		exact = pol.Sources
	}
	ug, err := e.unitWriter(p.Ops)
	if err != nil {
		return res, err
	}
	if ug != nil {
		defer ug.End()
	}
	// The boot the moves' start times count from, recorded on their
	// intents (journal.Entry.Boot).
	var boot string
	if slices.ContainsFunc(p.Ops, func(op plan.Op) bool { return op.Kind == plan.Move }) {
		if boot, err = procid.Boot(e.FS); err != nil {
			return res, fmt.Errorf("nothing applied: the node's boot ID, which tells its processes from those of another boot, could not be read: %w", err)
		}
	}
	gw, end := e.writer(pol.Trees, exact)
	defer end()
	w := &guard{w: gw, check: applyCheck(pol), units: ug, checkUnit: pol.Check}
	begin := journal.Entry{Type: journal.Begin, By: e.By}
	if unfinished != nil {
		res.Run, res.Resumed = unfinished.ID, true
		begin.Type, begin.Note = journal.Resume, "continuing a run that was cut off"
	} else {
		res.Run = newRunID()
	}
	begin.Apply = res.Run
	if _, err := j.Append(begin); err != nil {
		return res, fmt.Errorf("nothing applied: %w", err)
	}
	for i, op := range p.Ops {
		sr, err := e.applyOne(j, w, res.Run, boot, i, op)
		if err != nil {
			if _, jerr := j.Append(journal.Entry{Type: journal.End, Apply: res.Run, Error: err.Error()}); jerr != nil {
				err = errors.Join(err, jerr)
			}
			return res, err
		}
		res.Steps = append(res.Steps, sr)
	}
	if _, err := j.Append(journal.Entry{Type: journal.End, Apply: res.Run}); err != nil {
		// Every operation is settled in the journal; only the run's close
		// is missing, which the next apply continues harmlessly.
		return res, fmt.Errorf("all %d operations applied and recorded, but closing the run failed: %w", len(p.Ops), err)
	}
	return res, nil
}

func newRunID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// applyOne reads the state op replaces, journals the intent (a move's
// with the node's boot ID), applies op and journals the outcome.
func (e *Engine) applyOne(j *journal.Journal, w *guard, run, boot string, i int, op plan.Op) (StepResult, error) {
	sr := StepResult{Op: op}
	fail := func(err error) error { return fmt.Errorf("operation %d (%s): %w", i+1, op.Description, err) }
	prev, err := e.prevState(op)
	if err != nil && op.IfGone != "" && errors.Is(err, fs.ErrNotExist) {
		// Gone since the plan (a pod deleted): nothing done, nothing to
		// journal.
		sr.Note = op.IfGone
		e.log().Info("step not applied", "op", i+1, "path", op.Path, "meaning", sr.Note)
		return sr, nil
	}
	if err != nil {
		return sr, fail(fmt.Errorf("not applied: %w", err))
	}
	in := journal.Entry{Type: journal.Intent, Apply: run, Op: &op, Prev: &prev}
	if op.Kind == plan.Move {
		in.Boot = boot
	}
	intent, err := j.Append(in)
	if err != nil {
		return sr, fail(fmt.Errorf("not applied, because it could not be journaled first: %w", err))
	}
	e.hook(StageIntent, i, 0)
	var opErr error
	switch op.Kind {
	case plan.Mkdir:
		if prev.Existed {
			// The plan saw no such directory (it reuses one cgwarden made
			// without a mkdir): someone else made it since.
			opErr = fmt.Errorf("%s appeared after the plan was made: not moving processes into a cgroup cgwarden did not create", op.Path)
			break
		}
		opErr = w.Mkdir(op.Path)
	case plan.Write:
		opErr = w.WriteFile(op.Path, []byte(op.Value))
		if errors.Is(opErr, unix.EINVAL) && op.File() == "cpu.cfs_quota_us" {
			opErr = fmt.Errorf("%w (on cgroup v1 a container's quota may not exceed its pod's)", opErr)
		} else if errors.Is(opErr, unix.EBUSY) && op.File() == "cgroup.subtree_control" {
			opErr = fmt.Errorf("%w (cgroup v2 enables controllers for children only in a cgroup without processes of its own)", opErr)
		}
	case plan.Rmdir:
		opErr = w.Rmdir(op.Path)
	case plan.Move:
		sr.Moved, sr.Exited, opErr = e.move(j, w, run, intent.Seq, i, op)
	case plan.Property:
		opErr = w.SetProperty(op, op.Value)
	}
	if (op.Kind == plan.Mkdir || op.Kind == plan.Write) && errors.Is(opErr, fs.ErrNotExist) {
		opErr = fmt.Errorf("the cgroup %s is gone (the pod was deleted?): %w", path.Dir(op.Path), opErr)
	}
	e.hook(StageApplied, i, 0)
	if (op.Kind == plan.Write || op.Kind == plan.Property) && opErr == nil {
		// A weight (or another setting, or systemd's property) written,
		// its outcome not yet recorded.
		failpoint.Hit("fix/after-write")
	}
	switch {
	case opErr == nil:
	case op.IfGone != "" && errors.Is(opErr, fs.ErrNotExist):
		sr.Note = op.IfGone
	// An emptied cgroup that holds processes again when it is removed
	// (the runtime started one there after the move) stays; the next
	// run moves them and removes it.
	case op.Kind == plan.Rmdir && errors.Is(opErr, unix.EBUSY):
		sr.Note = NoteRmdirBusy
	// A cgroup at a hierarchy's root (a misplacing runtime's) is removed
	// only with CAP_DAC_OVERRIDE: the root's directory is 0555.
	case op.Kind == plan.Rmdir && (errors.Is(opErr, unix.EACCES) || errors.Is(opErr, unix.EPERM)):
		sr.Note = NoteRmdirDenied
	case op.Optional && errors.Is(opErr, unix.EINVAL):
		sr.Note = "refused by the kernel: " + op.IfRefused
	}
	if sr.Note != "" {
		if _, jerr := j.Append(journal.Entry{Type: journal.Failed, Apply: run, Ref: intent.Seq, Error: opErr.Error(), Note: sr.Note}); jerr != nil {
			return sr, fail(fmt.Errorf("%v, and that could not be journaled: %w", opErr, jerr))
		}
		e.log().Info("step not applied", "op", i+1, "path", op.Path, "meaning", sr.Note)
		return sr, nil
	}
	if opErr != nil {
		if _, jerr := j.Append(journal.Entry{Type: journal.Failed, Apply: run, Ref: intent.Seq, Error: opErr.Error()}); jerr != nil {
			return sr, fail(errors.Join(opErr, fmt.Errorf("the failure could not be journaled either (revert will check the state): %w", jerr)))
		}
		return sr, fail(opErr)
	}
	if _, err := j.Append(journal.Entry{Type: journal.Done, Apply: run, Ref: intent.Seq}); err != nil {
		return sr, fail(fmt.Errorf("applied, but its completion could not be journaled (revert will check the state): %w", err))
	}
	e.log().Debug("applied", "op", i+1, "kind", op.Kind, "path", op.Path)
	return sr, nil
}

// prevState reads what op is about to replace.
func (e *Engine) prevState(op plan.Op) (plan.Prev, error) {
	var prev plan.Prev
	switch op.Kind {
	case plan.Write:
		v, err := e.read(op.Path)
		if err != nil {
			return prev, err
		}
		prev.Value = &v
		if op.File() == "cgroup.subtree_control" {
			if prev.Children, err = e.FS.ReadDirs(path.Dir(op.Path)); err != nil {
				return prev, err
			}
		}
	case plan.Mkdir:
		if _, err := e.FS.ReadDirs(op.Path); err == nil {
			prev.Existed = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			return prev, err
		}
	case plan.Move:
		prev.Pids = map[string][]int{}
		for _, pr := range op.Pairs {
			pids, err := e.pids(pr.Source)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return prev, err
			}
			prev.Pids[pr.Source] = pids
		}
	case plan.Property:
		if e.Units == nil {
			return prev, fmt.Errorf("no connection to systemd to read %s of %s", op.Property, op.Unit)
		}
		v, err := e.Units.Property(op.Unit, op.Property)
		if err != nil {
			return prev, err
		}
		s := strconv.FormatUint(v, 10)
		prev.Value = &s
	case plan.Rmdir:
		prev.Values = map[string]string{}
		for _, f := range op.Keep {
			if v, err := e.read(path.Join(op.Path, f)); err == nil {
				prev.Values[f] = v
			}
		}
	}
	return prev, nil
}

func (e *Engine) read(p string) (string, error) {
	b, err := e.FS.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}

// pids lists the processes of a cgroup directory.
func (e *Engine) pids(dir string) ([]int, error) {
	b, err := e.FS.ReadFile(path.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s/cgroup.procs: bad pid %q", dir, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// holds reports whether pid is in the cgroup dir right now. A move lists
// a cgroup once per pass and then writes its processes one by one; each is
// checked again just before its write, so a process that left in between
// (moved by its runtime or systemd, or exited and its ID reused) is not
// pulled out of a cgroup cgwarden was not asked about. The window left is
// that of one read and one write.
func (e *Engine) holds(dir string, pid int) (bool, error) {
	pids, err := e.pids(dir)
	if err != nil {
		return false, err
	}
	return slices.Contains(pids, pid), nil
}

// exited reports whether process pid no longer runs: gone, or a zombie
// waiting for its parent (the kernel refuses to move one with ESRCH too).
func (e *Engine) exited(pid int) bool {
	b, err := e.FS.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	// "pid (comm) S ...": the state follows the last ')', as comm may
	// hold anything.
	if i := bytes.LastIndexByte(b, ')'); err == nil && i >= 0 && i+2 < len(b) {
		return b[i+2] == 'Z' || b[i+2] == 'X'
	}
	return false
}

// move empties every source into its target: writing a process's ID into
// the target's cgroup.procs moves the process with all its threads. Passes
// repeat until one finds every source empty, so a process forked from a
// not-yet-moved parent during a pass is caught by the next one. A process
// that exits before it is moved (ESRCH) is recorded, not an error. The
// processes moved in each pass are journaled with their start times, so
// that a later process given the same PID is never taken for one of them.
func (e *Engine) move(j *journal.Journal, w *guard, run string, ref, i int, op plan.Op) (moved, exited []int, err error) {
	var gone []string
	w.moving = map[int]bool{}
	defer func() { w.moving = nil }()
	put, end, err := e.mover(w, op)
	if err != nil {
		return nil, nil, err
	}
	defer end()
	for round := 0; ; round++ {
		if round == MaxMoveRounds {
			return moved, exited, fmt.Errorf("the source still gets new processes after %d passes (is its runtime starting them there?)", MaxMoveRounds)
		}
		var pass, passExited []int
		starts := map[int]uint64{}
		seen := false
		var moveErr error
	pairs:
		for _, pr := range op.Pairs {
			pids, err := e.pids(pr.Source)
			if errors.Is(err, fs.ErrNotExist) {
				gone = appendUniq(gone, pr.Source)
				continue // removed by its runtime: nothing left to move there
			}
			if err != nil {
				moveErr = err
				break
			}
			for _, pid := range pids {
				seen = true
				e.hook(StageMovePid, i, pid)
				// Its start time is read before the check and the write:
				// should the PID change hands in between, the journal
				// names the older process, which a revert then finds gone,
				// rather than the newer one under the older's identity.
				start, serr := procid.Start(e.FS, pid)
				if in, err := e.holds(pr.Source, pid); err != nil || !in || errors.Is(serr, fs.ErrNotExist) {
					// Gone from the source since the listing (exited,
					// or moved by someone else): writing it now would
					// pull it out of wherever it went.
					if e.exited(pid) {
						passExited = appendUniq(passExited, pid)
					}
					continue
				}
				if serr != nil {
					moveErr = fmt.Errorf("process %d: its start time, which tells it from a later process given its PID, could not be read: %w", pid, serr)
					break pairs
				}
				w.moving[pid] = true
				err := put(pr.Target, pid)
				delete(w.moving, pid)
				switch {
				case err == nil:
					pass = appendUniq(pass, pid)
					starts[pid] = start
					// Between the first and the last process of a move.
					failpoint.Hit("fix/mid-move")
				case errors.Is(err, errESRCH):
					passExited = appendUniq(passExited, pid)
				default:
					moveErr = fmt.Errorf("moving process %d: %w", pid, err)
					break pairs
				}
			}
		}
		if len(pass) > 0 || len(passExited) > 0 {
			procs := make([]journal.Proc, 0, len(pass))
			for _, pid := range pass {
				start := starts[pid]
				procs = append(procs, journal.Proc{PID: pid, Start: &start})
			}
			if _, jerr := j.Append(journal.Entry{Type: journal.Progress, Apply: run, Ref: ref, Pids: procs, Exited: passExited}); jerr != nil {
				return moved, exited, errors.Join(moveErr, fmt.Errorf("moved processes %v but could not journal it (revert moves back whatever is in the target): %w", pass, jerr))
			}
		}
		for _, p := range pass {
			moved = appendUniq(moved, p)
		}
		for _, p := range passExited {
			exited = appendUniq(exited, p)
		}
		if moveErr != nil {
			return moved, exited, moveErr
		}
		e.hook(StageMoveRound, i, 0)
		if !seen {
			break
		}
	}
	if len(gone) == len(op.Pairs) && len(moved) == 0 {
		return moved, exited, fmt.Errorf("the source cgroups %s are gone (the container stopped?)", strings.Join(gone, ", "))
	}
	return moved, exited, nil
}

func appendUniq[T comparable](s []T, v T) []T {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// NoteRmdirDenied says why an emptied cgroup was not removed.
const NoteRmdirDenied = "not removed: removing a cgroup at the hierarchy's root (its directory is 0555) needs CAP_DAC_OVERRIDE, which the fix overlay does not grant; on cgroup v2 containerd may then drop the container's task at its restart (docs/systemd.md)"

// NoteRmdirBusy says why an emptied cgroup was not removed.
const NoteRmdirBusy = "not removed: it holds processes again (started there after the move); the next run moves them and removes it"
