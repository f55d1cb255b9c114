package journal

import (
	"cmp"
	"path"
	"slices"

	"github.com/cgwarden/cgwarden/internal/plan"
)

// Status is how an intent was settled.
type Status string

const (
	StatusDone   Status = "done"
	StatusFailed Status = "failed"
	// StatusInDoubt is an intent without an outcome: the process died
	// (or the journal filled up) after announcing the operation. It may
	// or may not have been applied.
	StatusInDoubt Status = "in-doubt"
)

// Step is one journaled operation with everything recorded about it.
type Step struct {
	Seq    int
	Op     plan.Op
	Prev   plan.Prev
	Status Status
	Error  string
	// Pids are the processes a move moved (progress and done entries),
	// with their start times when the journal has them.
	Pids []Proc
	// Boot is the node's boot ID when the step's intent was written (""
	// when the journal did not record it).
	Boot string
	// Undone is set once a revert settled the step.
	Undone bool
	// UndoFailed is set when a revert tried the step and could not undo
	// it (a process that exited, a cgroup its runtime removed). The step
	// stays pending so that `revert --all` tries it again.
	UndoFailed bool
}

// NeedsUndo reports whether a revert has to look at the step: anything
// done or in doubt, and failed moves (which may have moved some
// processes before failing). A failed mkdir, write or rmdir changed
// nothing: the kernel refused it.
func (s *Step) NeedsUndo() bool {
	if s.Undone {
		return false
	}
	return s.Status != StatusFailed || s.Op.Kind == plan.Move
}

// Run is one apply run (resumed runs keep their ID).
type Run struct {
	ID string
	// By is the command that ran it (Entry.By of its Begin; "" when not
	// recorded).
	By    string
	Steps []*Step
	// Ended is set when the run closed normally (even with an error).
	Ended bool
	// Reverted is set when a revert of the run finished; RevertStarted
	// when one began.
	Reverted, RevertStarted bool
}

// Pending lists the steps a revert must still settle, newest first.
func (r *Run) Pending() []*Step {
	var out []*Step
	for i := len(r.Steps) - 1; i >= 0; i-- {
		if r.Steps[i].NeedsUndo() {
			out = append(out, r.Steps[i])
		}
	}
	return out
}

// Settled reports whether a revert has already tried every pending step
// of the run: nothing is left that a plain `revert` could still do there,
// so it moves on to older runs (`revert --all` retries them all).
func (r *Run) Settled() bool {
	for _, s := range r.Pending() {
		if !s.UndoFailed {
			return false
		}
	}
	return true
}

// Applies groups entries into runs, oldest first.
func Applies(entries []Entry) []*Run {
	var runs []*Run
	byID := map[string]*Run{}
	bySeq := map[int]*Step{}
	for _, e := range entries {
		r := byID[e.Apply]
		if r == nil {
			r = &Run{ID: e.Apply}
			byID[e.Apply] = r
			runs = append(runs, r)
		}
		switch e.Type {
		case Begin, Resume:
			// The command that began the run (a resume by another
			// command continues its steps, it does not take them).
			r.By = cmp.Or(r.By, e.By)
		case Intent:
			if e.Op == nil {
				continue
			}
			s := &Step{Seq: e.Seq, Op: *e.Op, Status: StatusInDoubt, Boot: e.Boot}
			if e.Prev != nil {
				s.Prev = *e.Prev
			}
			r.Steps = append(r.Steps, s)
			bySeq[e.Seq] = s
		case Progress, Done, Failed:
			s := bySeq[e.Ref]
			if s == nil {
				continue
			}
			s.Pids = append(s.Pids, e.Pids...)
			switch e.Type {
			case Done:
				s.Status = StatusDone
			case Failed:
				s.Status, s.Error = StatusFailed, e.Error
			}
		case Undone:
			if s := bySeq[e.Ref]; s != nil {
				s.Undone = true
			}
		case UndoFailed:
			if s := bySeq[e.Ref]; s != nil {
				s.UndoFailed = true
			}
		case End:
			r.Ended = true
		case RevertBegin:
			r.RevertStarted = true
		case RevertEnd:
			r.Reverted = true
		}
	}
	return runs
}

// Unfinished returns the last run if it was cut off (no end, no revert)
// so a new apply can continue it; nil otherwise.
func Unfinished(runs []*Run) *Run {
	if len(runs) == 0 {
		return nil
	}
	r := runs[len(runs)-1]
	if r.Ended || r.RevertStarted {
		return nil
	}
	return r
}

// Owned lists the host paths of cgroups cgwarden created and has not
// removed again: mkdir steps done or in doubt, not undone, whose
// directory was not there before.
func Owned(runs []*Run) []string {
	var out []string
	for _, r := range runs {
		for _, s := range r.Steps {
			if s.Op.Kind == plan.Mkdir && !s.Prev.Existed && !s.Undone && s.Status != StatusFailed {
				out = append(out, path.Clean(s.Op.Path))
			}
			// A scope systemd started for a move (plan.Op.Scope) is
			// cgwarden's doing as a mkdir is: a later run may attach the
			// processes an interrupted move left behind.
			if s.Op.Kind == plan.Move && s.Op.Scope != nil && !s.Undone && s.Status != StatusFailed {
				for _, pr := range s.Op.Pairs {
					out = append(out, path.Clean(pr.Target))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// PropertyKey is how Written names a systemd unit property cgwarden set
// (a plan.Property step): "property <unit> <property>".
func PropertyKey(op plan.Op) string {
	return string(plan.Property) + " " + op.Unit + " " + op.Property
}

// Written lists the files cgwarden wrote and has not restored: write steps
// done or in doubt, not undone; and, by PropertyKey, the unit properties
// it set through systemd, likewise. Their first value is in the journal, so a
// later write of the same file (a weight re-asserted after the kubelet
// reset it, or moved to a new size) needs no entry of its own for a revert
// to restore the original.
func Written(runs []*Run) map[string]bool {
	out := map[string]bool{}
	eachWritten(runs, func(_ *Run, key, _ string) { out[key] = true })
	return out
}

// WrittenBy is Written for the runs of one command (by, Run.By), with the
// value each file (or unit property) was last set to by them: what the
// weight holder must not lower silently when `fix --apply` set it.
func WrittenBy(runs []*Run, by string) map[string]string {
	out := map[string]string{}
	eachWritten(runs, func(r *Run, key, value string) {
		if r.By == by {
			out[key] = value
		}
	})
	return out
}

// eachWritten calls f, in journal order, with each file (its clean path)
// and unit property (PropertyKey) that a step of runs, done or in doubt
// and not undone, set, and the value it set.
func eachWritten(runs []*Run, f func(r *Run, key, value string)) {
	for _, r := range runs {
		for _, s := range r.Steps {
			if s.Undone || s.Status == StatusFailed {
				continue
			}
			switch s.Op.Kind {
			case plan.Write:
				f(r, path.Clean(s.Op.Path), s.Op.Value)
			case plan.Property:
				f(r, PropertyKey(s.Op), s.Op.Value)
			}
		}
	}
}
