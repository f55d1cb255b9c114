package fix

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/procid"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// TestRevertTellsANewProcessFromTheOneMoved reverts a journal whose move
// recorded a process that is in cgwarden's target now (a sleep the test
// started there), under four identities: the right one (start time and
// boot ID as the kernel says), one with another start time (the process
// moved exited and a new one got its PID), one recorded in another boot
// (the node rebooted since), and none (a journal written before
// identities were recorded). The right one and none are moved back, as
// before; the other two are new processes: not moved, and the report
// says so.
func TestRevertTellsANewProcessFromTheOneMoved(t *testing.T) {
	for _, c := range []struct {
		name string
		// forge turns the real identity into the recorded one.
		forge     func(start uint64, boot string) (*uint64, string)
		moved     bool
		status    string
		note      string
		reusedPID bool
	}{
		{"right identity", func(s uint64, b string) (*uint64, string) { return &s, b }, true, Undone, "", false},
		{"no identity (old journal)", func(uint64, string) (*uint64, string) { return nil, "" }, true, Undone, "", false},
		{"another start time", func(s uint64, b string) (*uint64, string) { s++; return &s, b }, false, NotUndone, "is a new process (started after the run): not moved", true},
		{"another boot", func(s uint64, _ string) (*uint64, string) { return &s, "00000000-0000-4000-8000-000000000000" }, false, NothingToUndo, "the node has rebooted since", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.seed()
			src, tgt := literalRel(uidA, idA), targetRel(uidA, idA)
			f.s.Mkdir(tgt)
			sleeper := f.s.Start(tgt, "sleep", "600")
			pid := sleeper.Process.Pid
			start, err := procid.Start(f.s.Host, pid)
			if err != nil {
				t.Fatal(err)
			}
			boot, err := procid.Boot(f.s.Host)
			if err != nil {
				t.Fatal(err)
			}
			recStart, recBoot := c.forge(start, boot)
			forgeMove(t, f, src, tgt, journal.Proc{PID: pid, Start: recStart}, recBoot)

			rep, err := f.e.Revert(false)
			if err != nil {
				t.Fatalf("revert: %v", err)
			}
			var u *Undo
			for i := range rep.Undos {
				if rep.Undos[i].Op.Kind == plan.Move {
					u = &rep.Undos[i]
				}
			}
			if u == nil {
				t.Fatalf("no undo of the move: %+v", rep.Undos)
			}
			t.Logf("recorded start %v boot %q (real %d %s): %s: %s", fmtStart(recStart), recBoot, start, boot, u.Status, u.Note)
			inSource, inTarget := slices.Contains(f.pids(src), pid), slices.Contains(f.pids(tgt), pid)
			if c.moved {
				if !inSource || inTarget || !slices.Contains(u.MovedBack, pid) {
					t.Errorf("process %d (the one moved) not moved back: in source %v, in target %v, moved back %v", pid, inSource, inTarget, u.MovedBack)
				}
			} else {
				if inSource || !inTarget || slices.Contains(u.MovedBack, pid) {
					t.Errorf("process %d (a new process with a recorded PID) moved: in source %v, in target %v, moved back %v", pid, inSource, inTarget, u.MovedBack)
				}
			}
			if u.Status != c.status {
				t.Errorf("status %q, want %q", u.Status, c.status)
			}
			if c.note != "" && !strings.Contains(u.Note, c.note) {
				t.Errorf("note %q, want it to say %q", u.Note, c.note)
			}
			if c.reusedPID != slices.Contains(u.Reused, pid) || slices.Contains(u.Exited, pid) {
				t.Errorf("reused %v, exited %v: want %d reused %v, not exited", u.Reused, u.Exited, pid, c.reusedPID)
			}
			if c.reusedPID && !strings.Contains(u.Note, fmt.Sprintf("PID %d is a new process", pid)) {
				t.Errorf("note %q does not name PID %d as a new process", u.Note, pid)
			}
		})
	}
}

func fmtStart(p *uint64) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

// forgeMove writes a journal with one done move from src to tgt (in every
// hierarchy of the scratch) that moved p, its intent recorded in boot.
func forgeMove(t *testing.T, f *fixture, src, tgt string, p journal.Proc, boot string) {
	t.Helper()
	var pairs []plan.Pair
	for _, pt := range f.s.Points {
		pairs = append(pairs, plan.Pair{Source: path.Join(pt, f.s.Name, src), Target: path.Join(pt, f.s.Name, tgt)})
	}
	op := plan.Op{Kind: plan.Move, Rule: rules.MisplacedContainer, Pod: uidA, Pairs: pairs}
	j, err := lockJournal(f.journal)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	const run = "forged"
	must := func(e journal.Entry) journal.Entry {
		t.Helper()
		e.Apply = run
		e, err := j.Append(e)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	must(journal.Entry{Type: journal.Begin})
	in := must(journal.Entry{Type: journal.Intent, Op: &op, Prev: &plan.Prev{Pids: map[string][]int{pairs[0].Source: {p.PID}}}, Boot: boot})
	must(journal.Entry{Type: journal.Progress, Ref: in.Seq, Pids: []journal.Proc{p}})
	must(journal.Entry{Type: journal.Done, Ref: in.Seq})
	must(journal.Entry{Type: journal.End})
}

// TestMoveRecordsWhoItMoved: an apply that adopts a misplaced container
// journals each process it moved with its start time, and the move's
// intent with the node's boot ID, so a later revert can tell it from a
// process that got its PID since.
func TestMoveRecordsWhoItMoved(t *testing.T) {
	f := newFixture(t)
	f.seed()
	sleeper := f.s.Start(literalRel(uidA, idA), "sleep", "600")
	pid := sleeper.Process.Pid
	start, err := procid.Start(f.s.Host, pid)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := procid.Boot(f.s.Host)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Apply(Options{Only: []string{rules.MisplacedContainer}}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	entries, err := readJournal(f.journal)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []journal.Proc
	for _, r := range journal.Applies(entries) {
		for _, s := range r.Steps {
			if s.Op.Kind != plan.Move {
				continue
			}
			if s.Boot != boot {
				t.Errorf("the move's intent records boot %q, want %q", s.Boot, boot)
			}
			recorded = append(recorded, s.Pids...)
		}
	}
	i := slices.IndexFunc(recorded, func(p journal.Proc) bool { return p.PID == pid })
	if i < 0 || recorded[i].Start == nil || *recorded[i].Start != start {
		t.Fatalf("the journal records %+v, want process %d with start time %d", recorded, pid, start)
	}
}
