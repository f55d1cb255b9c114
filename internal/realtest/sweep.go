package realtest

import (
	"errors"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cgwarden/cgwarden/internal/mounts"
)

// scratchPrefix starts a test's scratch cgroup's name, then its test
// process's PID and random hex (mounts.ScratchName), so that a later test
// can tell whose it is.
const scratchPrefix = "cgwarden-test-"

// sweep removes the scratch cgroups, beside the one being made, of test
// processes that are gone: a test binary killed before its cleanups ran
// (a CI job stopped, a timeout's SIGKILL) leaves its scratch behind, and
// a leftover heavy weight at the hierarchy's root changes what every
// later test measures (a 262144-share scratch beside kubepods left a VM
// pod guaranteed 1.5% of its core). Only names of this form are touched,
// and only while no process has the PID they name (a PID in use, even by
// another program, keeps its scratch). The processes inside, the dead
// test's own burners, are killed first.
func (s *Scratch) sweep() {
	for _, p := range s.Points {
		names, err := s.Host.ReadDirs(p)
		if err != nil {
			continue
		}
		for _, n := range names {
			pid, ok := mounts.ScratchMaker(n, scratchPrefix)
			if !ok || !errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
				continue
			}
			if err := s.remove(path.Join(p, n)); err != nil {
				s.t.Logf("scratch sweep: leftover %s of dead test process %d not removed: %v", path.Join(p, n), pid, err)
				continue
			}
			s.t.Logf("scratch sweep: removed %s, left by test process %d that was killed before its cleanup", path.Join(p, n), pid)
		}
	}
}

// remove kills every process in dir's subtree and removes the subtree,
// deepest first.
func (s *Scratch) remove(dir string) error {
	var dirs []string
	var walk func(string) error
	walk = func(d string) error {
		dirs = append(dirs, d)
		subs, err := s.Host.ReadDirs(d)
		if err != nil {
			return err
		}
		for _, sub := range subs {
			if err := walk(path.Join(d, sub)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(dir); err != nil {
		return err
	}
	for _, d := range dirs {
		b, err := s.Host.ReadFile(path.Join(d, "cgroup.procs"))
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
	for _, d := range slices.Backward(dirs) {
		if err := s.rmdirPatiently(d); err != nil {
			return err
		}
	}
	return nil
}

// DeadPID is a PID that no process has now: that of a process that ran
// and exited. It skips t when the PID was reused at once.
func DeadPID(t testing.TB) int {
	t.Helper()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	pid := dead.Process.Pid
	if !errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
		t.Skipf("pid %d was reused at once; nothing to sweep", pid)
	}
	return pid
}
