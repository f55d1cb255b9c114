package demo_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/demo"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// cgwarden returns a command running this test binary as cgwarden.
func cgwarden(exe string, args ...string) *exec.Cmd {
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), envCLI+"=1")
	return cmd
}

// TestDemoInterruptedBySIGINT runs `cgwarden demo -o json` as a process
// and sends it SIGINT in the middle of its first measuring phase, as
// Ctrl-C on a terminal does: it exits non-zero, says it was interrupted,
// prints what it measured so far, and leaves neither its scratch cgroup
// nor any of its processes behind.
func TestDemoInterruptedBySIGINT(t *testing.T) {
	realtest.Require(t)
	realtest.LockCPU(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := cgwarden(exe, "demo", "-o", "json", "--duration", "20s")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scratchRE := regexp.MustCompile(`scratch cgroup (/` + demo.ScratchPrefix + `[0-9]+-[0-9a-f]{8})`)
	var scratch string
	var stderr strings.Builder
	measuring := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(errPipe)
		signalled := false
		for sc.Scan() {
			l := sc.Text()
			stderr.WriteString(l + "\n")
			if m := scratchRE.FindStringSubmatch(l); m != nil && scratch == "" {
				scratch = m[1]
			}
			if strings.Contains(l, `measuring "before"`) && !signalled {
				signalled = true
				close(measuring)
			}
		}
		_, _ = io.Copy(io.Discard, errPipe)
	}()
	select {
	case <-measuring:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("demo did not start measuring within 60s:\n%s", stderr.String())
	}
	time.Sleep(1500 * time.Millisecond)
	// The scratch and the children exist while it measures.
	if scratch == "" {
		t.Fatalf("no scratch named on stderr:\n%s", stderr.String())
	}
	if _, err := os.Stat(path.Join(cpuMount(), scratch)); err != nil {
		t.Fatalf("scratch %s not there while measuring: %v", scratch, err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	werr := cmd.Wait()
	<-done
	t.Logf("stderr:\n%s", stderr.String())
	var ee *exec.ExitError
	if werr == nil || !asExit(werr, &ee) || ee.ExitCode() == 0 {
		t.Errorf("interrupted demo exited with %v, want a non-zero exit", werr)
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr does not say the demo was interrupted")
	}
	var res demo.Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Errorf("stdout is not the demo's JSON: %v\n%s", err, stdout.String())
	} else if !res.Removed || res.Scratch != scratch {
		t.Errorf("JSON says scratch %q removed=%v, want %q removed", res.Scratch, res.Removed, scratch)
	}
	checkGoneExt(t, scratch)
}

// TestDemoRefusesWithoutRoot runs `cgwarden demo` as nobody: it exits 2
// with a message that says why it needs root, and creates nothing.
func TestDemoRefusesWithoutRoot(t *testing.T) {
	realtest.Require(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy nobody can run: the test binary's own directory is private.
	dir, err := os.MkdirTemp("", "cgwarden-demo-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "cgwarden")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := cgwarden(bin, "demo")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !asExit(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("demo as nobody: %v, want exit 2\n%s", err, out)
	}
	if !strings.Contains(string(out), "needs root") || !strings.Contains(string(out), "sudo") {
		t.Errorf("demo as nobody says %q: want it to say it needs root and how to run it", out)
	}
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

// cpuMount is where the scratch lives in the cpu (v1) or unified (v2)
// hierarchy.
func cpuMount() string {
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.shares"); err == nil {
		return "/sys/fs/cgroup/cpu"
	}
	return "/sys/fs/cgroup"
}

// checkGoneExt fails t if the scratch still exists or a demo child runs.
func checkGoneExt(t *testing.T, scratch string) {
	t.Helper()
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"} {
		if _, err := os.Stat(path.Join(p, scratch)); err == nil {
			t.Errorf("%s still exists", path.Join(p, scratch))
		}
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(path.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if args := strings.Split(string(b), "\x00"); len(args) > 1 && args[1] == demo.ChildCommand {
			t.Errorf("demo process left: %s %v", e.Name(), args)
		}
	}
}
