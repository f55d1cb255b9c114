package fix

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// TestAdoptSeed003 repairs the seed-003 layout on the live kernel: a CPU
// burner (which forks a second burner in the middle of the move) and a
// memory user sit in the literal misplaced directory; after the apply the
// source is empty, the pod cgroup's own CPU usage matches what the
// processes consumed per /proc, its memory includes the memory user's on
// v1 (charges moved), and the new container cgroup carries the settings
// copied from the runtime's cgroup.
func TestAdoptSeed003(t *testing.T) {
	f := newFixture(t)
	f.seed()
	src := literalRel(uidA, idA)
	var want map[string]string
	if f.s.V2() {
		want = map[string]string{"cpu.weight": "50", "cpu.max": "150000 100000", "memory.max": "536870912", "pids.max": "100"}
	} else {
		want = map[string]string{"cpu.shares": "512", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "150000", "memory.limit_in_bytes": "536870912", "pids.max": "100"}
	}
	for _, file := range plan.Settings(f.s.V2()) {
		f.s.Write(src, file, want[file])
	}
	burner := f.burner(src, -1)
	mem := f.memUser(src)
	before := f.pids(src)

	var forked []int
	f.e.Hook = func(s Stage, _ int, pid int) {
		// Just before the burner is moved for the first time, make it fork,
		// and wait until the child shows in the source: the pass that is
		// running has already listed the source, so only a later pass can
		// catch the child.
		if s != StageMovePid || pid != burner.Process.Pid || forked != nil {
			return
		}
		_ = syscall.Kill(pid, syscall.SIGUSR1)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			for _, p := range f.pids(src) {
				if !slices.Contains(before, p) {
					forked = append(forked, p)
				}
			}
			if forked != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Errorf("the burner did not fork within 5s")
	}
	t.Cleanup(func() { f.e.Revert(true) })
	res, err := f.e.Apply(Options{})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if len(forked) == 0 {
		t.Fatal("no process was forked during the move")
	}
	if left := f.pids(src); len(left) > 0 {
		t.Fatalf("processes %v left in the source", left)
	}
	if !f.s.V2() && f.threads(src) > 0 {
		t.Fatalf("%d threads left in the source", f.threads(src))
	}
	target := targetRel(uidA, idA)
	in := f.pids(target)
	for _, p := range append(before, forked...) {
		if !slices.Contains(in, p) {
			t.Errorf("process %d is not in the new container cgroup (it holds %v)", p, in)
		}
	}
	var move StepResult
	for _, s := range res.Steps {
		if s.Op.Kind == plan.Move {
			move = s
		}
	}
	if !slices.Contains(move.Moved, forked[0]) {
		t.Errorf("the move reports %v, not the forked child %d", move.Moved, forked[0])
	}
	for file, v := range want {
		if got := strings.TrimSpace(f.s.Read(target, file)); got != v {
			t.Errorf("%s of the new container cgroup = %q, the runtime's cgroup has %q", file, got, v)
		}
	}

	// The pod cgroup now accounts for the processes: its own usage over a
	// window matches theirs per /proc.
	burners := slices.DeleteFunc(slices.Clone(in), func(p int) bool { return p == mem.Process.Pid })
	c0, p0 := f.cpuSeconds(podRel(uidA)), procCPU(t, burners)
	time.Sleep(3 * time.Second)
	c1, p1 := f.cpuSeconds(podRel(uidA)), procCPU(t, burners)
	cg, pr := c1-c0, p1-p0
	t.Logf("pod cgroup charged %.3f s of CPU in 3 s; its processes used %.3f s per /proc", cg, pr)
	if pr < 0.2 {
		t.Fatalf("burners used only %.3f s in 3 s: too little to compare", pr)
	}
	if math.Abs(cg-pr) > 0.1*pr {
		t.Errorf("pod cgroup charged %.3f s, its processes used %.3f s: more than 10%% apart", cg, pr)
	}

	// On v1 the charges move with the processes where the kernel still
	// moves charges (before Linux 6.13); elsewhere, and on v2, they stay
	// where they were made, as the plan says.
	chargesMove := false
	for _, s := range res.Steps {
		if s.Op.File() == "memory.move_charge_at_immigrate" {
			chargesMove = !strings.HasPrefix(s.Note, "refused")
			t.Logf("memory.move_charge_at_immigrate: %s", orOK(s.Note))
		}
	}
	if f.s.V2() && chargesMove {
		t.Fatal("a v2 plan set memory.move_charge_at_immigrate")
	}
	if chargesMove {
		if m := f.memory(podRel(uidA)); m < memUserBytes*9/10 {
			t.Errorf("pod memory %d bytes does not include the memory user's %d although charges were to move", m, memUserBytes)
		}
	} else if m := f.memory(src); m < memUserBytes*9/10 {
		t.Errorf("source memory %d bytes: expected the memory user's %d to stay charged there (charges do not move here)", m, memUserBytes)
	} else {
		t.Logf("memory charges stayed with the source (%d bytes), as the plan says for this kernel", m)
	}

	// inspect's view: the pod now has a properly placed container with the
	// processes.
	sc, err := inventory.Open(f.s.Host)
	if err != nil {
		t.Fatal(err)
	}
	sc.Base = f.s.Name
	n, err := sc.Scan(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pod := n.Pod(uidA)
	if pod == nil {
		t.Fatal("scan lost the pod")
	}
	placed := false
	for _, c := range pod.Containers {
		if c.ID == idA && !c.Misplaced && c.Cgroup.Stats.Procs != nil && *c.Cgroup.Stats.Procs > 0 {
			placed = true
		}
	}
	if !placed {
		t.Errorf("scan after the fix shows no placed container %s with processes in pod %s", idA[:12], uidA)
	}
	// The runtime's emptied directory stays (no --remove-empty-source) but
	// is no misplaced container any more: a leftover of the pod.
	leftover := false
	for _, c := range pod.Containers {
		if c.Misplaced {
			t.Errorf("scan after the fix still shows container %s misplaced at %s", c.ID[:12], c.Cgroup.Path)
		}
		if c.Cgroup.Path == f.s.Cgroup(src) {
			leftover = c.Leftover
		}
	}
	if !leftover {
		t.Errorf("the emptied source %s is not among the pod's cgroups as a leftover", f.s.Cgroup(src))
	}
}

// TestAdoptRestoresIsolation: two pods of equal weight in a kubepods tree
// of low weight, one container misplaced at the top, one placed, both
// burners pinned to one CPU beside a busy cgroup outside kubepods. The
// misplaced one competes at the top with its own default weight and gets
// several times the placed one's CPU; after the fix they split kubepods'
// share evenly.
func TestAdoptRestoresIsolation(t *testing.T) {
	realtest.LockCPU(t)
	f := newFixture(t)
	weight, low := "cpu.shares", "256" // default 1024
	if f.s.V2() {
		weight, low = "cpu.weight", "25" // default 100
	}
	f.s.Mkdir("kubepods.slice")
	f.s.Write("kubepods.slice", weight, low)
	f.s.Mkdir(podRel(uidA))
	f.s.Mkdir(podRel(uidB))
	f.s.Mkdir(targetRel(uidB, idB))
	f.s.Mkdir(literalRel(uidA, idA))
	f.s.Mkdir("busy")
	f.s.Write("busy", weight, low)
	const cpu = 1
	f.burner(literalRel(uidA, idA), cpu)
	f.burner(targetRel(uidB, idB), cpu)
	f.burner("busy", cpu)

	// CPU is read from the cgroups' own accounting (ns resolution; /proc's
	// 10 ms ticks are too coarse for a 10% bound on a busy machine): the
	// misplaced burner's cgroup before the fix, its new one after.
	window := func(aRel string) (float64, float64) {
		a0, b0 := f.cpuSeconds(aRel), f.cpuSeconds(targetRel(uidB, idB))
		time.Sleep(5 * time.Second)
		return f.cpuSeconds(aRel) - a0, f.cpuSeconds(targetRel(uidB, idB)) - b0
	}
	time.Sleep(300 * time.Millisecond)
	a1, b1 := window(literalRel(uidA, idA))
	t.Logf("before the fix (5 s, one CPU): misplaced %.3f s, placed %.3f s (ratio %.2f)", a1, b1, a1/b1)
	if a1 < 3*b1 {
		t.Fatalf("before the fix the misplaced burner got %.3f s and the placed one %.3f s: not more than 3x apart, the test proves nothing", a1, b1)
	}
	t.Cleanup(func() { f.e.Revert(true) })
	if _, err := f.e.Apply(Options{}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	time.Sleep(time.Second) // let the scheduler settle the moved task's lag
	a2, b2 := window(targetRel(uidA, idA))
	t.Logf("after the fix (5 s, one CPU): adopted %.3f s, placed %.3f s (ratio %.2f)", a2, b2, a2/b2)
	if mean := (a2 + b2) / 2; math.Abs(a2-b2) > 0.1*mean {
		t.Errorf("after the fix the adopted burner got %.3f s and the placed one %.3f s: more than 10%% apart", a2, b2)
	}
	if left := f.pids(literalRel(uidA, idA)); len(left) > 0 {
		t.Errorf("processes %v left in the source", left)
	}
}

// TestRevertRestoresTree compares a full dump of the scratch tree (every
// directory, every value cgwarden may write, the processes of every
// cgroup and the cgroups of every test process) before a fix and after
// fix + revert; with --remove-empty-source too, whose undo recreates the
// runtime's cgroup with its settings.
func TestRevertRestoresTree(t *testing.T) {
	for _, removeSource := range []bool{false, true} {
		name := "keep-source"
		if removeSource {
			name = "remove-empty-source"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.seed()
			src := literalRel(uidA, idA)
			if f.s.V2() {
				f.s.Write(src, "cpu.weight", "39")
				f.s.Write(src, "memory.max", "268435456")
			} else {
				f.s.Write(src, "cpu.shares", "400")
				f.s.Write(src, "memory.limit_in_bytes", "268435456")
			}
			pids := []int{f.burner(src, 1).Process.Pid, f.s.Start(src, "sleep", "600").Process.Pid}
			before := f.dump(pids)
			if _, err := f.e.Apply(Options{RemoveEmptySource: removeSource}); err != nil {
				t.Fatalf("apply: %v", err)
			}
			fixed := f.dump(pids)
			if fixed == before {
				t.Fatal("the fix changed nothing in the dump")
			}
			if _, err := f.s.Host.ReadDirs(path.Join(f.s.Points[0], f.s.Name, src)); removeSource != isGone(err) {
				t.Fatalf("source removed = %v, want %v", isGone(err), removeSource)
			}
			rep, err := f.e.Revert(false)
			if err != nil {
				t.Fatalf("revert: %v", err)
			}
			if failed := rep.Failed(); len(failed) > 0 {
				t.Fatalf("revert could not undo %+v", failed)
			}
			if after := f.dump(pids); after != before {
				t.Errorf("tree after fix + revert differs from before.\nbefore:\n%s\nafter:\n%s", before, after)
			}
			checkJournal(t, f.journal, 0)
			if rep2, err := f.e.Revert(false); err != nil || len(rep2.Runs) != 0 {
				t.Errorf("a second revert found %v to revert (err %v)", rep2.Runs, err)
			}
		})
	}
}

func orOK(s string) string {
	if s == "" {
		return "accepted"
	}
	return s
}

// TestRemoveEmptySourceRefilled: a process the runtime starts in its
// cgroup after the move and before the cgroup is removed (an exec, say)
// leaves the cgroup in place, said in the step's note, with no failed
// run; the next run moves that process and removes the cgroup.
func TestRemoveEmptySourceRefilled(t *testing.T) {
	f := newFixture(t)
	f.seed()
	src := literalRel(uidA, idA)
	f.s.Start(src, "sleep", "600")
	p, pol, err := f.e.Plan(Options{RemoveEmptySource: true})
	if err != nil {
		t.Fatal(err)
	}
	rm := slices.IndexFunc(p.Ops, func(op plan.Op) bool { return op.Kind == plan.Rmdir })
	if rm < 0 {
		t.Fatalf("the plan removes no cgroup: %+v", p.Ops)
	}
	var late *exec.Cmd
	f.e.Hook = func(s Stage, op int, _ int) {
		if s == StageIntent && op == rm && late == nil {
			late = f.s.Start(src, "sleep", "600")
		}
	}
	t.Cleanup(func() { f.e.Revert(true) })
	res, err := f.e.ApplyPlan(p, pol)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if late == nil {
		t.Fatal("the removal was never reached")
	}
	var notes []string
	for _, s := range res.Steps {
		if s.Op.Kind == plan.Rmdir {
			notes = append(notes, s.Note)
		}
	}
	if len(notes) == 0 || notes[0] != NoteRmdirBusy {
		t.Fatalf("the removal's notes %q, want %q first", notes, NoteRmdirBusy)
	}
	srcDir := path.Join(f.s.Points[0], f.s.Name, src)
	if _, err := f.s.Host.ReadDirs(srcDir); err != nil {
		t.Fatalf("the refilled source: %v, want it in place", err)
	}
	f.e.Hook = nil
	if _, err := f.e.Apply(Options{RemoveEmptySource: true}); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	if _, err := f.s.Host.ReadDirs(srcDir); !isGone(err) {
		t.Fatalf("after the second run the source: %v, want it gone", err)
	}
	if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", late.Process.Pid)); err != nil || strings.Contains(string(cg), src) {
		t.Errorf("the late process's cgroups %q (%v): still in the source", cg, err)
	}
}
