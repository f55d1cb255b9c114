package fix

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// TestRevertStaysInTheHierarchies reverts a journal that names paths no
// apply could have changed (edited by hand, or copied from another
// machine): a "created" directory outside every cgroup hierarchy, and a
// move between two hierarchies. Revert grants the door exactly what the
// journal names, so it must refuse these steps itself: the directory
// stays, and the steps are reported as not undone.
func TestRevertStaysInTheHierarchies(t *testing.T) {
	f := newFixture(t)
	f.seed()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if len(f.s.Points) < 2 && !f.s.V2() {
		t.Fatalf("want two v1 hierarchies, have %v", f.s.Points)
	}
	src := filepath.Join(f.s.Points[0], f.s.Name, literalRel(uidA, idA))
	tgt := filepath.Join(f.s.Points[len(f.s.Points)-1], f.s.Name, podRel(uidA))
	j, err := lockJournal(f.journal)
	if err != nil {
		t.Fatal(err)
	}
	const run = "forged"
	steps := []plan.Op{
		{Kind: plan.Mkdir, Rule: rules.MisplacedContainer, Path: victim},
	}
	if !f.s.V2() {
		steps = append(steps, plan.Op{Kind: plan.Move, Rule: rules.MisplacedContainer, Pairs: []plan.Pair{{Source: src, Target: tgt}}})
	}
	if _, err := j.Append(journal.Entry{Type: journal.Begin, Apply: run}); err != nil {
		t.Fatal(err)
	}
	for _, op := range steps {
		in, err := j.Append(journal.Entry{Type: journal.Intent, Apply: run, Op: &op, Prev: &plan.Prev{}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.Append(journal.Entry{Type: journal.Done, Apply: run, Ref: in.Seq}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.Append(journal.Entry{Type: journal.End, Apply: run}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	sleeper := f.s.Start(podRel(uidA), "sleep", "600")

	rep, err := f.e.Revert(false)
	if err != nil {
		t.Fatalf("revert: %v", err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("revert removed %s, a directory outside every cgroup hierarchy: %v", victim, err)
	}
	if got := f.pids(literalRel(uidA, idA)); len(got) != 0 {
		t.Errorf("revert moved %v into the source from another hierarchy's cgroup (sleeper %d)", got, sleeper.Process.Pid)
	}
	if n := len(rep.Failed()); n != len(steps) {
		t.Errorf("revert reports %d steps not undone, want %d: %+v", n, len(steps), rep.Undos)
	}
}
