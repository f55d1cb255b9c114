package fix

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
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
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/procid"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

// Undo is what a revert did with one journaled operation.
type Undo struct {
	Run string  `json:"run"`
	Op  plan.Op `json:"op"`
	// Status is "undone", "nothing to undo" (the state was already as
	// before) or "not undone".
	Status string `json:"status"`
	Note   string `json:"note,omitempty"`
	// MovedBack and Exited are the processes a move's undo moved back,
	// and those recorded as moved that have exited since.
	MovedBack []int `json:"movedBack,omitempty"`
	Exited    []int `json:"exited,omitempty"`
	// Reused are PIDs recorded as moved that a new process holds now
	// (another start time, or the node rebooted since): the process
	// moved has exited, and the new one is not moved.
	Reused []int `json:"reused,omitempty"`
}

// not is u not undone, for the reason format says.
func (u Undo) not(format string, a ...any) Undo {
	u.Status, u.Note = NotUndone, fmt.Sprintf(format, a...)
	return u
}

// nothing is u with nothing to undo (note says why, when it says).
func (u Undo) nothing(note string) Undo {
	u.Status, u.Note = NothingToUndo, note
	return u
}

// Undo statuses.
const (
	Undone        = "undone"
	NothingToUndo = "nothing to undo"
	NotUndone     = "not undone"
)

// rmdirTries bounds the wait for exiting processes to leave a cgroup.
const rmdirTries = 50

// RevertReport is what a revert did, newest operation first.
type RevertReport struct {
	Runs  []string `json:"runs"`
	Undos []Undo   `json:"undos"`
}

// Failed lists what could not be undone.
func (r *RevertReport) Failed() []Undo {
	var out []Undo
	for _, u := range r.Undos {
		if u.Status == NotUndone {
			out = append(out, u)
		}
	}
	return out
}

// Revert undoes the last run that has something left to undo, or every
// such run (all), newest operation first. A plain revert skips runs whose
// remaining steps an earlier revert already tried and could not undo;
// all retries them too.
func (e *Engine) Revert(all bool) (rep *RevertReport, err error) {
	err = e.locked(func(j *journal.Journal) error {
		runs := journal.Applies(j.Entries())
		rep = &RevertReport{Runs: []string{}, Undos: []Undo{}}
		for i := len(runs) - 1; i >= 0; i-- {
			r := runs[i]
			pending := r.Pending()
			if len(pending) == 0 || !all && r.Settled() {
				// A run whose every pending step a revert already tried
				// and could not undo does not pin a plain revert to it
				// forever.
				continue
			}
			rep.Runs = append(rep.Runs, r.ID)
			if err := e.revertRun(j, r, pending, rep); err != nil {
				return err
			}
			if !all {
				break
			}
		}
		return nil
	})
	return rep, err
}

func (e *Engine) revertRun(j *journal.Journal, r *journal.Run, pending []*journal.Step, rep *RevertReport) error {
	points, err := e.points()
	if err != nil {
		return fmt.Errorf("nothing reverted: %w", err)
	}
	allowed := map[string]bool{}
	var exact, units []string
	allow := func(k plan.Kind, p string) {
		allowed[string(k)+" "+path.Clean(p)] = true
		exact = append(exact, p)
	}
	// The journal grants revert its exact writes, so a step naming a
	// path outside the cgroup hierarchies (a journal edited by hand, or
	// written on another machine) must not reach the door's allowance.
	outside := map[*journal.Step]string{}
	for _, s := range pending {
		if why := outsideHierarchies(s.Op, points); why != "" {
			outside[s] = why
			continue
		}
		switch s.Op.Kind {
		case plan.Write:
			allow(plan.Write, s.Op.Path)
		case plan.Property:
			allowed[string(plan.Property)+" "+s.Op.Unit+" "+s.Op.Property+" "+path.Clean(s.Op.Path)] = true
			units = appendUniq(units, s.Op.Unit)
		case plan.Mkdir:
			allow(plan.Rmdir, s.Op.Path)
		case plan.Move:
			for _, pr := range s.Op.Pairs {
				allow(plan.Write, path.Join(pr.Source, "cgroup.procs"))
			}
		case plan.Rmdir:
			allow(plan.Mkdir, s.Op.Path)
			for f := range s.Prev.Values {
				allow(plan.Write, path.Join(s.Op.Path, f))
			}
		}
	}
	// The boot now, which a move's recorded processes are compared with
	// ("" when it cannot be read: then only their start times are).
	var boot string
	if slices.ContainsFunc(pending, func(s *journal.Step) bool { return s.Op.Kind == plan.Move }) {
		if boot, err = procid.Boot(e.FS); err != nil {
			e.log().Warn("reverting without the node's boot ID: recorded processes are told apart by their start times alone", "err", err)
		}
	}
	gw, end := e.writer(nil, exact)
	defer end()
	w := &guard{w: gw, check: exactCheck(allowed), checkUnit: exactUnitCheck(allowed)}
	if len(units) > 0 && e.Units != nil {
		w.units = e.Units.Grant(units)
		defer w.units.End()
	}
	if _, err := j.Append(journal.Entry{Type: journal.RevertBegin, Apply: r.ID}); err != nil {
		return fmt.Errorf("nothing reverted: %w", err)
	}
	failed := false
	for _, s := range pending {
		var u Undo
		if why, bad := outside[s]; bad {
			u = Undo{Op: s.Op, Status: NotUndone, Note: why + ": not touched"}
		} else {
			failpoint.Hit("fix/before-undo")
			u = e.undo(w, s, boot)
		}
		u.Run = r.ID
		rep.Undos = append(rep.Undos, u)
		ent := journal.Entry{Type: journal.Undone, Apply: r.ID, Ref: s.Seq, Pids: journal.Bare(u.MovedBack), Exited: u.Exited, Note: u.Status}
		if u.Note != "" {
			ent.Note += ": " + u.Note
		}
		if u.Status == NotUndone {
			failed = true
			ent.Type, ent.Error, ent.Note = journal.UndoFailed, u.Note, ""
		}
		if _, err := j.Append(ent); err != nil {
			return fmt.Errorf("%s %s: %s, but the journal could not record it (a new revert checks again): %w", s.Op.Kind, opPath(s.Op), u.Status, err)
		}
	}
	if !failed {
		if _, err := j.Append(journal.Entry{Type: journal.RevertEnd, Apply: r.ID}); err != nil {
			return err
		}
	}
	return nil
}

// points are the mount points of the hierarchies an apply may have
// changed.
func (e *Engine) points() ([]string, error) {
	sc, err := inventory.Open(e.FS)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range plan.Hierarchies(sc.Places) {
		out = append(out, h.Point)
	}
	return out, nil
}

// outsideHierarchies says why op names a path no apply could have
// changed: one not strictly beneath a mount point of points, or a move
// between two hierarchies. "" when every path is in place.
func outsideHierarchies(op plan.Op, points []string) string {
	point := func(p string) string {
		c := path.Clean(p)
		if !path.IsAbs(p) {
			return ""
		}
		for _, pt := range points {
			if c != pt && cgroupfs.Within(c, pt) {
				return pt
			}
		}
		return ""
	}
	bad := func(p string) string {
		return fmt.Sprintf("the journal names %s, outside the cgroup hierarchies %v", p, points)
	}
	if op.Kind == plan.Move {
		if len(op.Pairs) == 0 {
			return "the journal's move names no cgroups"
		}
		for _, pr := range op.Pairs {
			src, tgt := point(pr.Source), point(pr.Target)
			switch {
			case src == "":
				return bad(pr.Source)
			case tgt == "":
				return bad(pr.Target)
			case src != tgt:
				return fmt.Sprintf("the journal's move goes from %s to %s, across two hierarchies", pr.Source, pr.Target)
			}
		}
		return ""
	}
	if point(op.Path) == "" {
		return bad(op.Path)
	}
	return ""
}

func opPath(op plan.Op) string {
	if op.Path != "" {
		return op.Path
	}
	if len(op.Pairs) > 0 {
		return op.Pairs[0].Target
	}
	return ""
}

// undo settles one step by looking at the current state (boot is the
// node's boot ID now, "" when unknown).
func (e *Engine) undo(w *guard, s *journal.Step, boot string) Undo {
	u := Undo{Op: s.Op, Status: Undone}
	op := s.Op
	switch op.Kind {
	case plan.Write:
		if s.Prev.Value == nil {
			return u.not("the journal has no previous value for %s", op.Path)
		}
		prev := *s.Prev.Value
		cur, err := e.read(op.Path)
		if errors.Is(err, fs.ErrNotExist) {
			return u.nothing("the cgroup is gone")
		}
		if err != nil {
			return u.not("%v", err)
		}
		val := prev
		if op.File() == "cgroup.subtree_control" {
			val = plan.ControlUndo(prev, cur)
			if val == "" {
				return u.nothing("")
			}
			// Disabling a controller takes its files away from every
			// child: one that appeared since the apply (the runtime
			// placing a container properly) may rely on them.
			kids, err := e.FS.ReadDirs(path.Dir(op.Path))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return u.not("%v", err)
			}
			if added := slices.DeleteFunc(kids, func(k string) bool { return slices.Contains(s.Prev.Children, k) }); len(added) > 0 {
				return u.not("left %q: child cgroups %v appeared since the apply and may use these controllers", cur, added)
			}
		} else if cur == prev {
			return u.nothing("")
		}
		if err := w.WriteFile(op.Path, []byte(val)); err != nil {
			return u.not("restoring %q: %v", prev, err)
		}
		u.Note = fmt.Sprintf("%q restored", prev)
	case plan.Property:
		return e.undoProperty(w, s, u)
	case plan.Mkdir:
		if s.Prev.Existed {
			return u.nothing("cgwarden did not create it")
		}
		var err error
		for try := 0; try < rmdirTries; try++ {
			err = w.Rmdir(op.Path)
			if err == nil || !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(20 * time.Millisecond) // exiting processes take a moment to leave
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return u.nothing("already gone")
		case errors.Is(err, unix.EBUSY):
			pids, _ := e.pids(op.Path)
			return u.not("%s still holds processes %v or child cgroups", op.Path, pids)
		case err != nil:
			return u.not("%v", err)
		}
	case plan.Move:
		return e.undoMove(w, s, u, boot)
	case plan.Rmdir:
		if _, err := e.FS.ReadDirs(op.Path); err == nil {
			return u.nothing("it is there")
		}
		if err := w.Mkdir(op.Path); err != nil {
			return u.not("recreating it: %v", err)
		}
		for _, f := range op.Keep {
			v, ok := s.Prev.Values[f]
			if !ok {
				continue
			}
			if err := w.WriteFile(path.Join(op.Path, f), []byte(v)); err != nil {
				return u.not("recreated, but restoring %s = %q: %v", f, v, err)
			}
		}
		u.Note = "recreated with its recorded settings"
	}
	return u
}

// undoMove moves every process in the targets back to the sources. The
// target is a cgroup cgwarden created, so whatever is in it came from the
// source (or was forked there by what came from it); the PIDs the journal
// recorded are never moved on their own. Two exceptions, which the
// recorded identities (journal.Proc) tell:
//
//   - a step recorded in another boot than the node's now: cgroups do not
//     survive a reboot, so whatever is at the target's path was made by
//     someone else since, and every PID recorded names a new process.
//     Nothing is moved (nothing cgwarden moved is left).
//   - a recorded PID that a process with another start time holds now: the
//     process moved has exited and a new one got its PID. Even in the
//     target (forked there, or put there by someone else) it is not the
//     process cgwarden moved: it is not moved, the step is not undone (its
//     target cannot be emptied) and the report says so.
//
// A step or a process recorded without an identity (a journal written
// before they were recorded) is handled as it was then: see journal.Proc.
func (e *Engine) undoMove(w *guard, s *journal.Step, u Undo, boot string) Undo {
	recorded := e.recordedProcs(s)
	if s.Boot != "" && boot != "" && s.Boot != boot {
		return e.undoMoveOtherBoot(s, u, boot, recorded)
	}
	var notes []string
	// newProcess holds the recorded PIDs found in a new process's hands.
	newProcess := map[int]bool{}
	for _, pr := range s.Op.Pairs {
		if _, err := e.FS.ReadDirs(pr.Source); errors.Is(err, fs.ErrNotExist) {
			left, err := e.pids(pr.Target)
			if errors.Is(err, fs.ErrNotExist) || err == nil && len(left) == 0 {
				// The pod was deleted (its cgroup removed with the one
				// cgwarden made in it) or the node rebooted: the
				// processes went with their cgroups, and nothing is left
				// to move back. Not a failure: one would pin every later
				// revert to this run.
				notes = append(notes, fmt.Sprintf("the source %s was removed and %s holds no process (the pod was deleted?): nothing to move back", pr.Source, pr.Target))
				continue
			}
			u.Status = NotUndone
			notes = append(notes, fmt.Sprintf("the source %s was removed (by its runtime?): processes %v stay in %s", pr.Source, left, pr.Target))
			continue
		}
		failed := false
		for round := 0; ; round++ {
			pids, err := e.pids(pr.Target)
			// New processes with recorded PIDs stay where they are.
			pids = slices.DeleteFunc(pids, func(pid int) bool { return newProcess[pid] })
			if errors.Is(err, fs.ErrNotExist) || err == nil && len(pids) == 0 {
				break
			}
			if err != nil || round == MaxMoveRounds {
				u.Status = NotUndone
				why := fmt.Sprint(err)
				if err == nil {
					why = fmt.Sprintf("processes still arriving after %d rounds", MaxMoveRounds)
				}
				notes = append(notes, fmt.Sprintf("emptying %s: %s", pr.Target, why))
				break
			}
			for _, pid := range pids {
				e.hook(StageUndoPid, -1, pid)
				if in, err := e.holds(pr.Target, pid); err != nil || !in {
					continue // left cgwarden's cgroup since the listing: not cgwarden's to move
				}
				if p, ok := recorded[pid]; ok && e.reused(p) {
					newProcess[pid] = true
					continue
				}
				err := w.WriteFile(path.Join(pr.Source, "cgroup.procs"), []byte(strconv.Itoa(pid)))
				switch {
				case err == nil:
					u.MovedBack = appendUniq(u.MovedBack, pid)
				case errors.Is(err, errESRCH):
				default:
					failed = true
					notes = append(notes, fmt.Sprintf("moving %d back: %v", pid, err))
				}
			}
			if failed {
				u.Status = NotUndone
				break
			}
		}
	}
	if len(newProcess) > 0 {
		// They keep the target from being emptied (and removed).
		u.Status = NotUndone
	}
	// Processes the journal says were moved that no longer exist, or
	// whose PID a new process holds.
	for _, pid := range slices.Sorted(maps.Keys(recorded)) {
		switch {
		case e.exited(pid):
			u.Exited = append(u.Exited, pid)
		case newProcess[pid] || e.reused(recorded[pid]):
			u.Reused = append(u.Reused, pid)
		}
	}
	if len(u.Exited) > 0 {
		notes = append(notes, fmt.Sprintf("processes %v have exited and cannot be moved back", u.Exited))
	}
	if len(u.Reused) > 0 {
		notes = append(notes, reusedNote(u.Reused, "started after the run"))
	}
	if u.Status == Undone && len(u.MovedBack) == 0 && len(u.Exited) == 0 && len(u.Reused) == 0 {
		u.Status = NothingToUndo
	}
	u.Note = strings.Join(notes, "; ")
	return u
}

// undoMoveOtherBoot settles a move recorded in another boot (see
// undoMove): nothing is moved, and the report says which recorded PIDs
// new processes hold now, and what sits in the targets.
func (e *Engine) undoMoveOtherBoot(s *journal.Step, u Undo, boot string, recorded map[int]journal.Proc) Undo {
	u.Status = NothingToUndo
	notes := []string{fmt.Sprintf("recorded in boot %s and the node has rebooted since (boot %s): every process the move moved is gone, and nothing is moved back", s.Boot, boot)}
	for _, pid := range slices.Sorted(maps.Keys(recorded)) {
		if e.exited(pid) {
			u.Exited = append(u.Exited, pid)
		} else {
			u.Reused = append(u.Reused, pid)
		}
	}
	if len(u.Reused) > 0 {
		notes = append(notes, reusedNote(u.Reused, "in this boot"))
	}
	var left []int
	for _, pr := range s.Op.Pairs {
		if pids, err := e.pids(pr.Target); err == nil {
			for _, pid := range pids {
				left = appendUniq(left, pid)
			}
		}
	}
	if len(left) > 0 {
		notes = append(notes, fmt.Sprintf("its targets (%s...) hold processes %v of this boot, not cgwarden's to move: left", s.Op.Pairs[0].Target, left))
	}
	u.Note = strings.Join(notes, "; ")
	return u
}

// recordedProcs are the processes the journal names for a move step: the
// ones it moved (with their start times, when recorded) and the ones
// found in its sources when it began (by PID alone).
func (e *Engine) recordedProcs(s *journal.Step) map[int]journal.Proc {
	out := map[int]journal.Proc{}
	for _, ps := range s.Prev.Pids {
		for _, pid := range ps {
			out[pid] = journal.Proc{PID: pid}
		}
	}
	for _, p := range s.Pids {
		if p.Start != nil || out[p.PID].Start == nil {
			out[p.PID] = p
		}
	}
	return out
}

// reused reports whether a process other than p holds p's PID now: one
// runs with another start time. A p recorded without a start time is
// taken to be the one running (see journal.Proc); one that exited is not
// reused (exited says so).
func (e *Engine) reused(p journal.Proc) bool {
	if p.Start == nil {
		return false
	}
	now, err := procid.Start(e.FS, p.PID)
	return err == nil && now != *p.Start
}

// reusedNote says that the PIDs pids name new processes, started when.
func reusedNote(pids []int, when string) string {
	if len(pids) == 1 {
		return fmt.Sprintf("PID %d is a new process (%s): not moved", pids[0], when)
	}
	return fmt.Sprintf("PIDs %v are new processes (%s): not moved", pids, when)
}

// undoProperty sets a unit's weight property back to the value the
// journal recorded (unset again, when it was never set), unless it holds
// that already or the unit is gone.
func (e *Engine) undoProperty(w *guard, s *journal.Step, u Undo) Undo {
	op := s.Op
	if s.Prev.Value == nil {
		return u.not("the journal has no previous value for %s of %s", op.Property, op.Unit)
	}
	if e.Units == nil {
		return u.not("%s of %s was set through systemd, and cgwarden has no connection to systemd here", op.Property, op.Unit)
	}
	prev := *s.Prev.Value
	cur, err := e.Units.Property(op.Unit, op.Property)
	if errors.Is(err, fs.ErrNotExist) {
		return u.nothing("the unit is gone")
	}
	if err != nil {
		return u.not("%v", err)
	}
	if strconv.FormatUint(cur, 10) == prev {
		return u.nothing("")
	}
	if err := w.SetProperty(op, prev); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return u.nothing("the unit is gone")
		}
		return u.not("restoring %s=%s: %v", op.Property, prev, err)
	}
	u.Note = fmt.Sprintf("%s=%s restored through systemd", op.Property, prev)
	if prev == strconv.FormatUint(systemd.Unset, 10) {
		u.Note = op.Property + " unset again through systemd"
	}
	return u
}
