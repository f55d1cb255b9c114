package fix

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/plan"
)

// killedApply runs an apply of the fixture's tree in a child process (the
// test binary re-executed in roleApply), waits until it stops at stage of
// operation op, and SIGKILLs it there.
func (f *fixture) killedApply(stage Stage, op int) {
	f.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+roleApply, envScratch+"="+f.s.Name, envPoints+"="+strings.Join(f.s.Points, ":"),
		envJournal+"="+f.journal, fmt.Sprintf("%s=%s:%d", envStop, stage, op))
	out, err := cmd.StdoutPipe()
	if err != nil {
		f.t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(l)
	}()
	select {
	case l := <-line:
		if l != "stopped" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			f.t.Fatalf("apply child said %q, stderr: %s", l, stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		f.t.Fatalf("apply child did not reach %s of operation %d in 30s; stderr: %s", stage, op+1, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		f.t.Fatal(err)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		f.t.Fatalf("apply child was not killed by SIGKILL: %v", err)
	}
}

// TestSIGKILLDuringApply kills an apply between two steps — after an
// intent was journaled but before its operation ran, after an operation
// ran but before its outcome was journaled, and in the middle of a move —
// and then either reverts (the tree must be exactly as before) or applies
// again (the run continues: the source is emptied) and then reverts.
func TestSIGKILLDuringApply(t *testing.T) {
	type point struct {
		name  string
		stage Stage
		op    func(*testing.T, *plan.Plan) int
	}
	points := []point{
		{"intent-of-first-mkdir", StageIntent, func(t *testing.T, p *plan.Plan) int { return opIndex(t, p, plan.Mkdir, "") }},
		{"applied-first-write", StageApplied, func(t *testing.T, p *plan.Plan) int { return opIndex(t, p, plan.Write, "") }},
		{"mid-move", StageMoveRound, func(t *testing.T, p *plan.Plan) int { return opIndex(t, p, plan.Move, "") }},
	}
	for _, pt := range points {
		for _, then := range []string{"revert", "apply-again"} {
			t.Run(pt.name+"/"+then, func(t *testing.T) {
				f := newFixture(t)
				f.seed()
				src := literalRel(uidA, idA)
				pids := []int{f.burner(src, 1).Process.Pid, f.s.Start(src, "sleep", "600").Process.Pid}
				before := f.dump(pids)
				p, _, err := f.e.Plan(Options{})
				if err != nil {
					t.Fatal(err)
				}
				f.killedApply(pt.stage, pt.op(t, p))
				checkJournal(t, f.journal, 1)
				if then == "apply-again" {
					res, err := f.e.Apply(Options{})
					if err != nil {
						t.Fatalf("apply after the kill: %v", err)
					}
					if !res.Resumed {
						t.Error("the second apply did not continue the cut-off run")
					}
					if left := f.pids(src); len(left) > 0 {
						t.Fatalf("after the second apply processes %v are left in the source", left)
					}
					if in := f.pids(targetRel(uidA, idA)); !slices.Equal(in, sorted(pids)) {
						t.Fatalf("new container cgroup holds %v, want %v", in, sorted(pids))
					}
				}
				rep, err := f.e.Revert(false)
				if err != nil {
					t.Fatalf("revert: %v", err)
				}
				if failed := rep.Failed(); len(failed) > 0 {
					t.Fatalf("revert could not undo %+v", failed)
				}
				if after := f.dump(pids); after != before {
					t.Errorf("tree after kill + revert differs from before.\nbefore:\n%s\nafter:\n%s", before, after)
				}
				checkJournal(t, f.journal, 0)
			})
		}
	}
}

func sorted(s []int) []int {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestPodVanishesMidApply removes the pod cgroup after the first intent
// is journaled: the apply stops with an error that says so, the journal
// records the failure, nothing was created, and the processes stay.
func TestPodVanishesMidApply(t *testing.T) {
	f := newFixture(t)
	f.seed()
	src := literalRel(uidA, idA)
	pids := []int{f.s.Start(src, "sleep", "600").Process.Pid}
	f.e.Hook = func(s Stage, op, _ int) {
		if s == StageIntent && op == 0 {
			for _, p := range f.s.Points {
				if err := f.s.Host.Rmdir(path.Join(p, f.s.Name, podRel(uidA))); err != nil {
					t.Errorf("removing the pod cgroup: %v", err)
				}
			}
		}
	}
	_, err := f.e.Apply(Options{})
	if err == nil || !strings.Contains(err.Error(), "is gone (the pod was deleted?)") || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("apply error = %v, want one saying the pod cgroup is gone", err)
	}
	entries := checkJournal(t, f.journal, 0)
	if last := entries[len(entries)-1]; last.Type != journal.End || last.Error == "" {
		t.Errorf("journal ends with %+v, want an end record carrying the error", last)
	}
	for _, p := range f.s.Points {
		if _, err := f.s.Host.ReadDirs(path.Join(p, f.s.Name, targetRel(uidA, idA))); !isGone(err) {
			t.Errorf("container cgroup exists in %s after the failed apply", p)
		}
	}
	if got := f.pids(src); !slices.Equal(got, pids) {
		t.Errorf("source holds %v, want %v", got, pids)
	}
	f.e.Hook = nil
	rep, err := f.e.Revert(false)
	if err != nil || len(rep.Failed()) > 0 {
		t.Fatalf("revert: %v %+v", err, rep)
	}
}

// TestRevertAfterPodDeleted: an adopted pod is deleted (its processes
// killed, its cgroups and the runtime's removed, as the kubelet and the
// runtime do); revert --all then has nothing to move back and says so,
// without failing — a failure would make every later revert retry it and
// exit non-zero for ever.
func TestRevertAfterPodDeleted(t *testing.T) {
	f := newFixture(t)
	f.seed()
	src := literalRel(uidA, idA)
	cmd := f.s.Start(src, "sleep", "600")
	if _, err := f.e.Apply(Options{}); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for _, rel := range []string{targetRel(uidA, idA), podRel(uidA), src} {
		for _, p := range f.s.Points {
			var err error
			for try := 0; try < 250; try++ {
				if err = f.s.Host.Rmdir(path.Join(p, f.s.Name, rel)); err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	rep, err := f.e.Revert(true)
	if err != nil {
		t.Fatal(err)
	}
	if failed := rep.Failed(); len(failed) > 0 {
		t.Fatalf("revert after the pod was deleted failed: %+v", failed)
	}
	for _, u := range rep.Undos {
		if u.Op.Kind == plan.Move && !strings.Contains(u.Note, "nothing to move back") {
			t.Errorf("the move's undo: %s, %q; want it to say there is nothing to move back", u.Status, u.Note)
		}
	}
	if rep2, err := f.e.Revert(true); err != nil || len(rep2.Runs) != 0 {
		t.Errorf("a second revert --all found %v to revert (err %v)", rep2.Runs, err)
	}
}

// TestProcessExitsMidMove kills one process just before the move writes
// it: the apply succeeds, reports it as exited, and the journal says so.
func TestProcessExitsMidMove(t *testing.T) {
	f := newFixture(t)
	f.seed()
	src := literalRel(uidA, idA)
	keep := f.s.Start(src, "sleep", "600")
	victim := f.s.Start(src, "sleep", "600")
	f.e.Hook = func(s Stage, _ int, pid int) {
		if s == StageMovePid && pid == victim.Process.Pid {
			_ = victim.Process.Kill()
			_ = victim.Wait()
		}
	}
	t.Cleanup(func() { f.e.Revert(true) })
	res, err := f.e.Apply(Options{})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	var move StepResult
	for _, s := range res.Steps {
		if s.Op.Kind == plan.Move {
			move = s
		}
	}
	if !slices.Contains(move.Exited, victim.Process.Pid) || !slices.Contains(move.Moved, keep.Process.Pid) {
		t.Fatalf("move moved %v, exited %v; want %d moved and %d exited", move.Moved, move.Exited, keep.Process.Pid, victim.Process.Pid)
	}
	if left := f.pids(src); len(left) > 0 {
		t.Fatalf("processes %v left in the source", left)
	}
	entries := checkJournal(t, f.journal, 0)
	recorded := false
	for _, e := range entries {
		if e.Type == journal.Progress && slices.Contains(e.Exited, victim.Process.Pid) {
			recorded = true
		}
	}
	if !recorded {
		t.Error("the journal does not record the process that exited")
	}
	rep, err := f.e.Revert(false)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range rep.Undos {
		if u.Op.Kind == plan.Move {
			if !slices.Contains(u.Exited, victim.Process.Pid) || !slices.Contains(u.MovedBack, keep.Process.Pid) {
				t.Errorf("revert of the move: moved back %v, exited %v", u.MovedBack, u.Exited)
			}
		}
	}
	if got := f.pids(src); !slices.Equal(got, []int{keep.Process.Pid}) {
		t.Errorf("after revert the source holds %v, want [%d]", got, keep.Process.Pid)
	}
}

// TestKernelRefusesAWrite makes the kernel refuse one of the plan's
// writes — on v1 a container quota above its pod's (EINVAL), on v2
// enabling controllers in a pod cgroup that holds a process (EBUSY, the
// no-internal-processes rule) — and checks the error names the file, the
// journal records the failure, and a revert restores the tree exactly.
func TestKernelRefusesAWrite(t *testing.T) {
	f := newFixture(t)
	f.seed()
	src := literalRel(uidA, idA)
	var file string
	pids := []int{f.s.Start(src, "sleep", "600").Process.Pid}
	if f.s.V2() {
		file = "cgroup.subtree_control"
		pids = append(pids, f.s.Start(podRel(uidA), "sleep", "600").Process.Pid)
	} else {
		file = "cpu.cfs_quota_us"
		f.s.Write(podRel(uidA), "cpu.cfs_quota_us", "50000")
		f.s.Write(src, "cpu.cfs_quota_us", "150000")
	}
	before := f.dump(pids)
	_, err := f.e.Apply(Options{})
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("apply error = %v, want one naming %s", err, file)
	}
	t.Logf("apply error: %v", err)
	entries := checkJournal(t, f.journal, 0)
	failed := false
	for _, e := range entries {
		failed = failed || e.Type == journal.Failed && strings.Contains(e.Error, file)
	}
	if !failed {
		t.Error("the journal does not record the refused write")
	}
	if got := f.pids(src); !slices.Equal(got, pids[:1]) {
		t.Errorf("source holds %v after the refused plan, want %v", got, pids[:1])
	}
	rep, err := f.e.Revert(false)
	if err != nil || len(rep.Failed()) > 0 {
		t.Fatalf("revert: %v %+v", err, rep)
	}
	if after := f.dump(pids); after != before {
		t.Errorf("tree after the failed apply + revert differs.\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestJournalDiskFull puts the journal on a 64 KiB tmpfs that is almost
// full: the apply stops with "no space left", the journal still reads
// back whole, every change visible in the tree has its intent journaled,
// and once there is room a revert restores the tree exactly.
func TestJournalDiskFull(t *testing.T) {
	f := newFixture(t)
	f.seed()
	src := literalRel(uidA, idA)
	pids := []int{f.s.Start(src, "sleep", "600").Process.Pid}
	before := f.dump(pids)

	dir := path.Join(t.TempDir(), "journal")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
		t.Fatalf("mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	filler := path.Join(dir, "filler")
	// Leave one page for the journal: a begin record and a few intents.
	if err := os.WriteFile(filler, make([]byte, 60<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	f.e.JournalDir = dir
	_, err := f.e.Apply(Options{})
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("apply error = %v, want no space left on device", err)
	}
	t.Logf("apply error: %v", err)
	entries, rerr := readJournal(dir)
	if rerr != nil {
		t.Fatalf("journal does not read back after the disk filled: %v", rerr)
	}
	raw, _ := os.ReadFile(path.Join(dir, journal.FileName))
	if len(raw) > 0 && raw[len(raw)-1] != '\n' {
		t.Error("the journal ends in a torn line")
	}
	intended := map[string]bool{}
	for _, e := range entries {
		if e.Type == journal.Intent {
			intended[string(e.Op.Kind)+" "+e.Op.Path] = true
			if e.Op.Kind == plan.Move {
				intended["move"] = true
			}
		}
	}
	for _, p := range f.s.Points {
		tdir := path.Join(p, f.s.Name, targetRel(uidA, idA))
		if _, err := f.s.Host.ReadDirs(tdir); err == nil && !intended["mkdir "+tdir] {
			t.Errorf("%s was created without a journaled intent", tdir)
		}
	}
	if got := f.pids(src); !slices.Equal(got, pids) && !intended["move"] {
		t.Errorf("processes were moved without a journaled intent")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	rep, err := f.e.Revert(false)
	if err != nil || len(rep.Failed()) > 0 {
		t.Fatalf("revert: %v %+v", err, rep)
	}
	if after := f.dump(pids); after != before {
		t.Errorf("tree after the failed apply + revert differs.\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestRevertLastAndAll: two applies (one pod each); revert undoes only the
// newest, revert --all the rest, and the tree is as before.
func TestRevertLastAndAll(t *testing.T) {
	f := newFixture(t)
	f.seed()
	f.s.Mkdir(podRel(uidB))
	f.s.Mkdir(literalRel(uidB, idB))
	pids := []int{f.s.Start(literalRel(uidA, idA), "sleep", "600").Process.Pid, f.s.Start(literalRel(uidB, idB), "sleep", "600").Process.Pid}
	before := f.dump(pids)
	for _, uid := range []string{uidA, uidB} {
		if _, err := f.e.Apply(Options{Pod: uid}); err != nil {
			t.Fatalf("apply --pod %s: %v", uid, err)
		}
	}
	if len(f.pids(literalRel(uidA, idA))) != 0 || len(f.pids(literalRel(uidB, idB))) != 0 {
		t.Fatal("the two applies did not empty both sources")
	}
	rep, err := f.e.Revert(false)
	if err != nil || len(rep.Runs) != 1 || len(rep.Failed()) > 0 {
		t.Fatalf("revert: %+v, %v", rep, err)
	}
	if got := f.pids(literalRel(uidB, idB)); !slices.Equal(got, pids[1:]) {
		t.Errorf("after revert pod B's source holds %v, want %v", got, pids[1:])
	}
	if got := f.pids(literalRel(uidA, idA)); len(got) != 0 {
		t.Errorf("revert without --all undid the older run too: pod A's source holds %v", got)
	}
	rep, err = f.e.Revert(true)
	if err != nil || len(rep.Runs) != 1 || len(rep.Failed()) > 0 {
		t.Fatalf("revert --all: %+v, %v", rep, err)
	}
	if after := f.dump(pids); after != before {
		t.Errorf("tree after two applies and two reverts differs.\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestConcurrentRunIsExcluded: while another process holds the journal's
// lock, an apply changes nothing and says why.
func TestConcurrentRunIsExcluded(t *testing.T) {
	f := newFixture(t)
	f.seed()
	pids := []int{f.s.Start(literalRel(uidA, idA), "sleep", "600").Process.Pid}
	before := f.dump(pids)
	j, err := lockJournal(f.journal)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if _, err := f.e.Apply(Options{}); !errors.Is(err, journal.ErrLocked) {
		t.Fatalf("apply beside a locked journal: %v, want ErrLocked", err)
	}
	if _, err := f.e.Revert(false); !errors.Is(err, journal.ErrLocked) {
		t.Fatalf("revert beside a locked journal: %v, want ErrLocked", err)
	}
	if after := f.dump(pids); after != before {
		t.Errorf("the tree changed although the journal was locked")
	}
}
