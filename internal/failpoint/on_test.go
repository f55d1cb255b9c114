//go:build failpoints

package failpoint

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// envChild makes the re-executed test binary hit point "t/p" five times,
// then exit 0.
const envChild = "CGWARDEN_FAILPOINT_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		for i := 0; i < 5; i++ {
			if Hit("t/p") {
				os.Stdout.WriteString("skipped\n")
			}
			os.Stdout.WriteString("passed\n")
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child runs the test binary hitting t/p five times with CGWARDEN_FAILPOINTS
// set to spec; it returns the child's output, its wait status and its
// trace.
func child(t *testing.T, spec string, env ...string) (stdout, stderr string, ws syscall.WaitStatus, trace string) {
	t.Helper()
	tr := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), envChild+"=1", Env+"="+spec, TraceEnv+"="+tr), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(tr)
	return out.String(), errb.String(), cmd.ProcessState.Sys().(syscall.WaitStatus), string(b)
}

// TestActions: each action fires on the hit it names and on no other.
func TestActions(t *testing.T) {
	out, errs, ws, trace := child(t, "t/p=kill@3")
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("kill@3: child ended with %v, want SIGKILL; stderr %s", ws, errs)
	}
	if got := strings.Count(out, "passed"); got != 2 {
		t.Errorf("kill@3: the child passed the point %d times before it died, want 2", got)
	}
	if !strings.Contains(errs, "cgwarden failpoint t/p: kill") {
		t.Errorf("kill@3: stderr %q does not name the point", errs)
	}
	if trace != strings.Repeat("t/p\n", 3) {
		t.Errorf("kill@3: trace %q, want three hits", trace)
	}

	out, errs, ws, _ = child(t, "t/p=panic@2")
	if ws.ExitStatus() != 2 || !strings.Contains(errs, "panic: cgwarden failpoint t/p") || strings.Count(out, "passed") != 1 {
		t.Errorf("panic@2: status %v, stdout %q, stderr %q", ws, out, errs)
	}

	out, _, ws, _ = child(t, "t/p=skip@4")
	if ws.ExitStatus() != 0 || out != strings.Repeat("passed\n", 3)+"skipped\n"+strings.Repeat("passed\n", 2) {
		t.Errorf("skip@4: status %v, stdout %q", ws, out)
	}

	out, _, ws, _ = child(t, "t/p=skip@*")
	if ws.ExitStatus() != 0 || out != strings.Repeat("skipped\npassed\n", 5) {
		t.Errorf("skip@*: status %v, stdout %q", ws, out)
	}

	out, errs, ws, trace = child(t, "t/p=stall=1ms;other=kill")
	if ws.ExitStatus() != 0 || strings.Count(out, "passed") != 5 || !strings.Contains(errs, "t/p: stall") || trace != strings.Repeat("t/p\n", 5) {
		t.Errorf("stall: status %v, stdout %q, stderr %q, trace %q", ws, out, errs, trace)
	}

	_, errs, ws, _ = child(t, "t/p=explode")
	if ws.ExitStatus() != 97 || !strings.Contains(errs, "unknown action") {
		t.Errorf("a bad spec: status %v, stderr %q; want exit 97 naming the mistake", ws, errs)
	}
}

// TestArmedFileFiresOnce: a point armed in CGWARDEN_FAILPOINTS_FILE fires
// in the first process that reads the file, which removes it; the next
// process runs clean. Terms may be on lines of their own.
func TestArmedFileFiresOnce(t *testing.T) {
	arm := filepath.Join(t.TempDir(), "arm")
	if err := os.WriteFile(arm, []byte("other=panic\nt/p=kill@2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errs, ws, _ := child(t, "", FileEnv+"="+arm)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL || strings.Count(out, "passed") != 1 {
		t.Fatalf("armed file: child ended with %v after %q, want SIGKILL at the second hit; stderr %s", ws, out, errs)
	}
	if _, err := os.Stat(arm); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the armed file is still there after the process read it: %v", err)
	}
	out, errs, ws, _ = child(t, "", FileEnv+"="+arm)
	if ws.ExitStatus() != 0 || strings.Count(out, "passed") != 5 {
		t.Errorf("the next process: status %v, stdout %q, stderr %q; want a clean run", ws, out, errs)
	}

	// A file that does not parse stops the process, as the variable does.
	if err := os.WriteFile(arm, []byte("t/p=explode"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errs, ws, _ = child(t, "", FileEnv+"="+arm); ws.ExitStatus() != 97 || !strings.Contains(errs, "explode") {
		t.Errorf("a bad armed file: status %v, stderr %q; want exit 97 naming it", ws, errs)
	}
}
