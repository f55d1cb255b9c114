package fix

import (
	"slices"
	"testing"

	"github.com/cgwarden/cgwarden/internal/plan"
)

// TestMoveLeavesAProcessThatLeftTheSource moves one process of the
// misplaced cgroup elsewhere (as its runtime or systemd might) between the
// move's listing of the source and its write: cgwarden must not then pull
// it out of a cgroup that is not the source. The same holds for a
// revert's move back: a process that left cgwarden's cgroup meanwhile is
// not pulled back into the source from where it went.
func TestMoveLeavesAProcessThatLeftTheSource(t *testing.T) {
	f := newFixture(t)
	f.seed()
	f.s.Mkdir("elsewhere")
	src := literalRel(uidA, idA)
	keep := f.s.Start(src, "sleep", "600")
	away := f.s.Start(src, "sleep", "600")
	back := f.s.Start(src, "sleep", "600")
	f.e.Hook = func(s Stage, _ int, pid int) {
		switch {
		case s == StageMovePid && pid == away.Process.Pid:
			f.s.Move("elsewhere", pid)
		case s == StageUndoPid && pid == back.Process.Pid:
			f.s.Move("elsewhere", pid)
		}
	}
	t.Cleanup(func() { f.e.Revert(true) })
	res, err := f.e.Apply(Options{})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	for _, s := range res.Steps {
		if s.Op.Kind == plan.Move && slices.Contains(s.Moved, away.Process.Pid) {
			t.Errorf("move reports %d as moved, though it had left the source", away.Process.Pid)
		}
	}
	for _, p := range f.s.Points {
		if got := f.pidsAt(p, "elsewhere"); !slices.Equal(got, []int{away.Process.Pid}) {
			t.Fatalf("%s/elsewhere holds %v after the apply, want [%d] (cgwarden moved a process out of a cgroup it was not asked about)\n%s",
				p, got, away.Process.Pid, f.dump([]int{away.Process.Pid}))
		}
	}
	tgt := targetRel(uidA, idA)
	if got, want := f.pids(tgt), sorted([]int{keep.Process.Pid, back.Process.Pid}); !slices.Equal(got, want) {
		t.Fatalf("target holds %v, want %v", got, want)
	}
	if _, err := f.e.Revert(false); err != nil {
		t.Fatal(err)
	}
	for _, p := range f.s.Points {
		if got, want := f.pidsAt(p, "elsewhere"), sorted([]int{away.Process.Pid, back.Process.Pid}); !slices.Equal(got, want) {
			t.Fatalf("%s/elsewhere holds %v after the revert, want %v (the revert pulled a process out of a cgroup it was not asked about)", p, got, want)
		}
	}
	if got := f.pids(src); !slices.Equal(got, []int{keep.Process.Pid}) {
		t.Errorf("source holds %v after the revert, want [%d]", got, keep.Process.Pid)
	}
}
