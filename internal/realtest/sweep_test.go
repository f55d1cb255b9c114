package realtest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"strconv"
	"testing"
	"time"
)

// TestSweepRemovesLeftoversOfDeadTests: a scratch left by a test process
// that is gone (its PID free), with a process still inside, is removed and
// its process killed when the next scratch is made; one whose PID is in
// use and one of another name stay, in every hierarchy.
func TestSweepRemovesLeftoversOfDeadTests(t *testing.T) {
	first := NewScratch(t)
	deadPID := DeadPID(t)
	leftover := fmt.Sprintf("cgwarden-test-%d-%s", deadPID, "0123abcd")
	live := fmt.Sprintf("cgwarden-test-%d-%s", os.Getpid(), "4567cdef")
	other := "cgwarden-test-89abcdef" // the form before PIDs: whose it is is unknown
	for _, n := range []string{leftover, leftover + "/child", live, other} {
		for _, p := range first.Points {
			if err := first.Host.Mkdir(path.Join(p, n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for _, n := range []string{leftover + "/child", leftover, live, other} {
			for _, p := range first.Points {
				if err := first.rmdirPatiently(path.Join(p, n)); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			}
		}
	})
	// The dead test's burner, left running in its scratch.
	orphan := exec.Command("sleep", "600")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- orphan.Wait() }()
	t.Cleanup(func() { _ = orphan.Process.Kill() })
	for _, p := range first.Points {
		if err := first.Host.WriteFile(path.Join(p, leftover, "child", "cgroup.procs"), []byte(strconv.Itoa(orphan.Process.Pid))); err != nil {
			t.Fatal(err)
		}
	}

	NewScratch(t)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Errorf("the leftover's process %d still runs", orphan.Process.Pid)
	}
	for _, p := range first.Points {
		if _, err := os.Stat(path.Join(p, leftover)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want it removed", path.Join(p, leftover), err)
		}
		for _, n := range []string{live, other} {
			if _, err := os.Stat(path.Join(p, n)); err != nil {
				t.Errorf("%s swept: %v", path.Join(p, n), err)
			}
		}
	}
}
