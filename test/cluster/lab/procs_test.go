package lab

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// daemon is a shell loop that stays one process (sh, not an exec'ed
// sleep), so that its executable stays the recorded one.
func daemon(name, script string) Proc {
	return Proc{Name: name, Exe: "/bin/sh", Args: []string{"-c", script + "; while :; do sleep 0.1; done"}, Grace: 5 * time.Second}
}

func TestStartStopAgain(t *testing.T) {
	l := Lab{Dir: t.TempDir()}
	ctx := context.Background()
	// Ready once it has written its line (a stop before would lose it).
	marker := filepath.Join(l.Dir, "echoed")
	p := daemon("d", `echo "started with $LAB_TEST"; touch `+marker)
	p.Env = []string{"LAB_TEST=one"}
	p.Ready.Exec = []string{"test", "-e", marker}
	q, err := l.Start(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Stop("d", 0) })
	if !l.Running("d") {
		t.Fatalf("%s does not run after Start (pid %d)", q.Name, q.PID)
	}
	if _, err := l.Start(ctx, p); err == nil || !strings.Contains(err.Error(), "runs already") {
		t.Fatalf("a second Start of a running daemon: %v, want an error that it runs already", err)
	}
	first := q.PID
	if err := l.Stop("d", -1); err != nil {
		t.Fatal(err)
	}
	if l.Running("d") || syscall.Kill(first, 0) == nil && isProc(first, q.Start) {
		t.Fatalf("pid %d still runs after Stop", first)
	}
	// The record stays, and starts it again with its arguments and
	// environment.
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	q, err = l.StartAgain(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if q.PID == first || !l.Running("d") {
		t.Fatalf("StartAgain: pid %d (was %d), running %v", q.PID, first, l.Running("d"))
	}
	if b, _ := os.ReadFile(l.LogFile("d")); strings.Count(string(b), "started with one\n") != 2 {
		t.Fatalf("the log has not both starts, each with the environment:\n%s", b)
	}
	names, err := l.Names()
	if err != nil || len(names) != 1 || names[0] != "d" {
		t.Fatalf("Names: %v %v, want [d]", names, err)
	}
}

func isProc(pid int, start uint64) bool {
	st, ok := procStart(pid)
	return ok && st == start
}

func TestStopKillsAfterGrace(t *testing.T) {
	l := Lab{Dir: t.TempDir()}
	// Ready once the trap is set: a SIGTERM before it would end the
	// shell.
	trapped := filepath.Join(l.Dir, "trapped")
	p := daemon("stubborn", `trap "" TERM; touch `+trapped)
	p.Grace = 300 * time.Millisecond
	p.Ready.Exec = []string{"test", "-e", trapped}
	q, err := l.Start(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := l.Stop("stubborn", -1); err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	if isProc(q.PID, q.Start) {
		t.Fatalf("pid %d ignores SIGTERM and still runs after Stop", q.PID)
	}
	if took < p.Grace {
		t.Fatalf("Stop returned after %v, before the grace of %v: it did not wait for SIGTERM", took, p.Grace)
	}
	t.Logf("stopped by SIGKILL %v after SIGTERM", took.Round(time.Millisecond))
}

func TestStartWaitsUntilReady(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	l := Lab{Dir: t.TempDir()}
	p := daemon("d", "true")
	p.Ready.HTTP = srv.URL
	const after = 400 * time.Millisecond
	time.AfterFunc(after, func() { ready.Store(true) })
	t0 := time.Now()
	if _, err := l.Start(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	defer l.Stop("d", 0)
	if took := time.Since(t0); took < after {
		t.Fatalf("Start returned after %v, before the daemon was ready (%v)", took, after)
	}
}

func TestStartFailsWhenTheDaemonExits(t *testing.T) {
	l := Lab{Dir: t.TempDir()}
	p := Proc{Name: "dies", Exe: "/bin/sh", Args: []string{"-c", "sleep 0.3; echo 'cannot bind'; exit 3"}}
	p.Ready.HTTP = "http://127.0.0.1:1/never"
	p.Ready.Timeout = 30 * time.Second
	t0 := time.Now()
	_, err := l.Start(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "cannot bind") {
		t.Fatalf("Start of a daemon that exits: %v, want that it exited, with its log", err)
	}
	if took := time.Since(t0); took > 10*time.Second {
		t.Fatalf("Start failed after %v: it waited for the timeout instead of noticing the exit", took)
	}
}

// A PID is the recorded process only with its recorded start time: a PID
// reused by another process is not it.
func TestRunningChecksStartTime(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ = filepath.EvalSymlinks(exe)
	st, ok := procStart(os.Getpid())
	if !ok {
		t.Fatal("no start time for this process")
	}
	me := &Proc{PID: os.Getpid(), Start: st, Exe: exe}
	if !me.Running() {
		t.Fatalf("this process, recorded with its start time %d and %s, is not Running", st, exe)
	}
	other := *me
	other.Start = st + 1
	if other.Running() {
		t.Fatal("a record with another start time is Running: a reused PID would pass for the daemon")
	}
	other = *me
	other.Exe = "/bin/true"
	if other.Running() {
		t.Fatal("a record with another executable is Running")
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/run/a`:            "/run/a",
		`/run/a\040b`:       "/run/a b",
		`/x\134y\011z`:      "/x\\y\tz",
		`/trailing\04`:      `/trailing\04`,
		`/not\999octal\040`: `/not\999octal `,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestProcessesFindsByCommandLine(t *testing.T) {
	marker := fmt.Sprintf("lab-processes-%d", os.Getpid())
	find := func() []int {
		return processes(func(argv []string) bool { return len(argv) == 4 && argv[3] == marker })
	}
	// A loop, so that sh stays the process (it would exec a lone sleep).
	cmd := exec.Command("/bin/sh", "-c", "while :; do sleep 1; done", marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if got := find(); !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Errorf("processes found %v, want [%d]", got, cmd.Process.Pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if got := find(); len(got) != 0 {
		t.Errorf("processes found %v after the process exited", got)
	}
}
