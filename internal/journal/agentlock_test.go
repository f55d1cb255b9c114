package journal

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentLock: one holder at a time, across processes; the refused one
// is told who holds it; a release, or the holder's death, lets the next in.
func TestAgentLock(t *testing.T) {
	if os.Getenv("CGWARDEN_AGENTLOCK_CHILD") != "" {
		l, err := TryAgentLock(os.Getenv("CGWARDEN_AGENTLOCK_CHILD"), "the child")
		if err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("locked\n")
		_ = l
		select {} // killed by the parent
	}
	dir := t.TempDir()
	a, err := TryAgentLock(dir, "agent a (pid 1)")
	if err != nil {
		t.Fatal(err)
	}
	// flock is per open file description: a second open in this process
	// is refused as another process's would be.
	_, err = TryAgentLock(dir, "agent b")
	if !errors.Is(err, ErrAgentLocked) || !strings.Contains(err.Error(), "agent a (pid 1)") {
		t.Fatalf("a second agent beside a held lock: %v, want ErrAgentLocked naming agent a", err)
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	b, err := TryAgentLock(dir, "agent b")
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, AgentLockName)); string(got) != "agent b\n" {
		t.Errorf("lock file says %q, want the new holder alone", got)
	}
	b.Release()

	// Another process holds it, and is killed: the kernel drops its lock.
	cmd := exec.Command(os.Args[0], "-test.run=^TestAgentLock$")
	cmd.Env = append(os.Environ(), "CGWARDEN_AGENTLOCK_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := out.Read(buf); err != nil || string(buf) != "locked\n" {
		t.Fatalf("child: %q %v", buf, err)
	}
	if _, err := TryAgentLock(dir, "agent c"); !errors.Is(err, ErrAgentLocked) || !strings.Contains(err.Error(), "the child") {
		t.Fatalf("beside another process's lock: %v, want ErrAgentLocked naming the child", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	c, err := TryAgentLock(dir, "agent c")
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	c.Release()
}

// TestNodeLock: the node lock is a flock on an open directory; a second
// open of the same directory is refused with ErrAgentLocked (and closed),
// and takes it once the first is released. (The agent's directory is a
// cgroup; the agent's live test takes it on a scratch cgroup.)
func TestNodeLock(t *testing.T) {
	dir := t.TempDir()
	open := func() *os.File {
		f, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, err := TryNodeLock(open())
	if err != nil {
		t.Fatal(err)
	}
	second := open()
	if _, err := TryNodeLock(second); !errors.Is(err, ErrAgentLocked) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second node lock: %v, want ErrAgentLocked naming %s", err, dir)
	}
	if err := second.Close(); err == nil {
		t.Errorf("a refused node lock left its directory open")
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	b, err := TryNodeLock(open())
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	_ = b.Release()
}
