package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// TestMain lets this test binary stand in for a package's test binary:
// the guest runs it as "fake-binary MODE" (fakeBinary).
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "fake-binary" {
		os.Exit(fakeBinary(os.Args[2]))
	}
	os.Exit(m.Run())
}

// fakeOutput is what fakeBinary "ok" writes, for a working directory wd
// and CGWARDEN_REQUIRE_REAL=req: on stdout and stderr, test2json's marker
// byte among it, ending mid-line.
func fakeOutput(wd, req string) string {
	return fmt.Sprintf("=== RUN   TestFake\ncwd=%s CGWARDEN_REQUIRE_REAL=%s\n", wd, req) +
		"on stderr\n" +
		"\x16--- PASS: TestFake (0.00s)\nno newline"
}

// fakeBinary is a test binary's part in these tests.
func fakeBinary(mode string) int {
	switch mode {
	case "ok":
		wd, _ := os.Getwd()
		out := fakeOutput(wd, os.Getenv("CGWARDEN_REQUIRE_REAL"))
		i := strings.Index(out, "on stderr\n")
		os.Stdout.WriteString(out[:i])
		os.Stderr.WriteString("on stderr\n")
		os.Stdout.WriteString(out[i+len("on stderr\n"):])
		return 0
	case "exit3":
		return 3
	case "hang":
		// A burner of its own, in its own process group as tests start
		// them, then stuck.
		burner := exec.Command(os.Args[0], "fake-binary", "sleep")
		burner.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := burner.Start(); err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Printf("burner %d\n", burner.Process.Pid)
	case "sleep":
	default:
		return 2
	}
	time.Sleep(time.Hour)
	return 0
}

// lockedBuffer is a guest's console, written from its goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tree is a repository root on the host with the package dir in it, and
// the guest's /src with the same dir.
type tree struct{ root, src, wd, guestWd string }

func newTree(t *testing.T) tree {
	tr := tree{root: t.TempDir(), src: t.TempDir()}
	tr.wd = filepath.Join(tr.root, "internal", "pkg")
	tr.guestWd = filepath.Join(tr.src, "internal", "pkg")
	for _, d := range []string{tr.wd, tr.guestWd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

// startGuest serves g on a loopback port for the test and returns its
// address.
func startGuest(t *testing.T, g *guest) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.serve(ln) }()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// runFake runs this binary as a fake test binary in MODE through a real
// guest, and returns the status, vmexec's output and the guest's console.
func runFake(t *testing.T, mode string, limit int) (int, string, string) {
	tr := newTree(t)
	console := &lockedBuffer{}
	g := &guest{src: tr.src, tmp: t.TempDir(), console: console, grace: 300 * time.Millisecond}
	var out bytes.Buffer
	r := &runner{client: client{addr: startGuest(t, g), silence: 30 * time.Second}, root: tr.root, limit: limit, out: &out}
	status := r.run(tr.wd, os.Args[0], []string{"fake-binary", mode})
	return status, out.String(), console.String()
}

// TestRunInGuest: the binary runs in the guest from the package's
// directory under src with CGWARDEN_REQUIRE_REAL=1, and its output comes
// back byte for byte, stdout and stderr in the order written.
func TestRunInGuest(t *testing.T) {
	tr := newTree(t)
	console := &lockedBuffer{}
	g := &guest{src: tr.src, tmp: t.TempDir(), console: console, grace: time.Second}
	var out bytes.Buffer
	r := &runner{client: client{addr: startGuest(t, g), silence: 30 * time.Second}, root: tr.root, limit: 60, out: &out}
	t.Setenv("CGWARDEN_REQUIRE_REAL", "") // the guest sets it, not its parent
	if status := r.run(tr.wd, os.Args[0], []string{"fake-binary", "ok"}); status != 0 {
		t.Fatalf("status %d, output:\n%s", status, out.String())
	}
	if want := fakeOutput(tr.guestWd, "1"); out.String() != want {
		t.Errorf("output\n%q\nwant\n%q", out.String(), want)
	}
	if c := console.String(); !strings.Contains(c, "internal/pkg: running, limit 60s") || !strings.Contains(c, "internal/pkg: exit status 0") {
		t.Errorf("console:\n%s", c)
	}
	if left, _ := os.ReadDir(g.tmp); len(left) != 0 {
		t.Errorf("binaries left in the guest's tmp: %v", left)
	}
}

// TestRunExitStatus: vmexec exits with the binary's status.
func TestRunExitStatus(t *testing.T) {
	if status, out, _ := runFake(t, "exit3", 60); status != 3 {
		t.Fatalf("status %d, want 3; output:\n%s", status, out)
	}
}

// TestWatchdogKillsStuckBinary: past its limit a binary is shown (its
// tasks), sent SIGQUIT (Go's goroutine dump) and killed with the burner
// it started in a process group of its own; the status is a failure.
func TestWatchdogKillsStuckBinary(t *testing.T) {
	status, out, console := runFake(t, "hang", 1)
	if status == 0 {
		t.Errorf("status 0 for a killed binary")
	}
	for _, want := range []string{"VMTEST HANG: internal/pkg still running after 1s", "  task ", "SIGQUIT"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(console, "VMTEST HANG") {
		t.Errorf("the console lacks the report:\n%s", console)
	}
	var burner int
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "burner "); ok {
			burner, _ = strconv.Atoi(v)
		}
	}
	if burner == 0 {
		t.Fatalf("no burner pid in the output:\n%s", out)
	}
	gone := false
	t.Cleanup(func() { // it outlived the watchdog: not left burning
		if !gone {
			_ = syscall.Kill(burner, syscall.SIGKILL)
		}
	})
	// Dead, or a zombie left for whoever inherited it.
	poll.Every(50*time.Millisecond).Until(t, 5*time.Second, fmt.Sprintf("the burner %d gone with the watchdog's kill", burner), func() (bool, string, error) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", burner))
		gone = err != nil || strings.Contains(string(stat), ") Z ")
		return gone, string(stat), nil
	})
}

// TestPingAndPoweroff: the daemon answers a ping, and ends at poweroff.
func TestPingAndPoweroff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g := &guest{console: io.Discard}
	done := make(chan error, 1)
	go func() { done <- g.serve(ln) }()
	c := client{addr: ln.Addr().String(), silence: 10 * time.Second}
	if err := c.ask("ping"); err != nil {
		t.Fatal(err)
	}
	if err := c.ask("poweroff"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the daemon still serves after poweroff")
	}
}

// fakeGuest serves one connection with answer, after reading its job and
// binary, and returns its address.
func fakeGuest(t *testing.T, answer func(net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		j, err := readJob(conn)
		if err != nil {
			t.Errorf("fake guest: %v", err)
			return
		}
		if _, err := io.CopyN(io.Discard, conn, j.Size); err != nil {
			t.Errorf("fake guest: %v", err)
			return
		}
		answer(conn)
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// TestTruncatedStream: a connection that ends inside a frame, before the
// exit status, is a guest gone: said on a line of its own, status 1, the
// down file written; and the next binary fails at once from that file.
func TestTruncatedStream(t *testing.T) {
	tr := newTree(t)
	addr := fakeGuest(t, func(c net.Conn) {
		_ = writeFrame(c, frameOutput, []byte("=== RUN   TestX\nhalf a line"))
		_, _ = c.Write([]byte{frameOutput, 0, 0})
	})
	down := filepath.Join(t.TempDir(), "down")
	var out bytes.Buffer
	r := &runner{client: client{addr: addr, silence: 10 * time.Second}, root: tr.root, limit: 60, down: down, out: &out}
	if status := r.run(tr.wd, os.Args[0], nil); status != 1 {
		t.Errorf("status %d, want 1", status)
	}
	if !strings.HasPrefix(out.String(), "=== RUN   TestX\nhalf a line\nvmexec: the guest WENT AWAY while running internal/pkg's test binary: the connection ended without an exit status") {
		t.Errorf("output:\n%s", out.String())
	}
	why, err := os.ReadFile(down)
	if err != nil || !strings.Contains(string(why), "WENT AWAY") {
		t.Fatalf("down file: %q %v", why, err)
	}
	out.Reset()
	r.last = 0
	if status := r.run(tr.wd, os.Args[0], nil); status != 1 || !strings.HasPrefix(out.String(), "vmexec: not run: the guest was lost before: the guest WENT AWAY") {
		t.Errorf("after the loss: status %d, output:\n%s", status, out.String())
	}
}

// TestSilentGuest: a guest that says nothing for the silence bound has
// stalled.
func TestSilentGuest(t *testing.T) {
	tr := newTree(t)
	release := make(chan struct{})
	addr := fakeGuest(t, func(net.Conn) { <-release })
	defer close(release)
	var out bytes.Buffer
	r := &runner{client: client{addr: addr, silence: 300 * time.Millisecond}, root: tr.root, limit: 60, out: &out}
	t0 := time.Now()
	if status := r.run(tr.wd, os.Args[0], nil); status != 1 {
		t.Errorf("status %d, want 1", status)
	}
	if !strings.Contains(out.String(), "vmexec: the guest STALLED: nothing from it for 300ms while running internal/pkg's test binary") {
		t.Errorf("output:\n%s", out.String())
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("took %s to notice", d)
	}
}

// TestLoopbackOnly: the host side dials loopback addresses only.
func TestLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"10.0.2.15:7711", "example.com:7711", "[::]:7711"} {
		if _, err := (client{addr: addr, silence: time.Second}).dial(); err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("%s: %v", addr, err)
		}
	}
}

// TestPackageDir: the package's directory is the working directory
// relative to the root, and must be under it.
func TestPackageDir(t *testing.T) {
	tr := newTree(t)
	if dir, err := packageDir(tr.root, tr.wd); err != nil || dir != "internal/pkg" {
		t.Errorf("%q %v", dir, err)
	}
	if dir, err := packageDir(tr.root, tr.root); err != nil || dir != "." {
		t.Errorf("the root: %q %v", dir, err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(tr.root, link); err != nil {
		t.Fatal(err)
	}
	if dir, err := packageDir(link, tr.wd); err != nil || dir != "internal/pkg" {
		t.Errorf("through a symlink: %q %v", dir, err)
	}
	if dir, err := packageDir(tr.wd, tr.root); err == nil {
		t.Errorf("a directory above the root: %q", dir)
	}
}

// TestSelectsNothing: a -test.run that lists none of the binary's tests
// (this binary's, listed on the host) is answered here as the binary would
// answer it, without a guest; one that lists some, a subtest pattern or no
// pattern runs in the guest.
func TestSelectsNothing(t *testing.T) {
	wd, _ := os.Getwd()
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"-test.v=test2json", "-test.run", "NoSuchTest"}, true},
		{[]string{"-test.run=NoSuchTest", "-test.timeout=1m"}, true},
		{[]string{"-test.run", "PackageDir"}, false},
		{[]string{"-test.run=PackageDir"}, false},
		{[]string{"-test.run", "NoSuchTest/x"}, false},
		{[]string{"-test.v"}, false},
	} {
		if got := selectsNothing(wd, os.Args[0], c.args); got != c.want {
			t.Errorf("selectsNothing(%q) = %v, want %v", c.args, got, c.want)
		}
	}
	// Through run: no job reaches the guest (nothing listens at the
	// address), the output is the binary's own for no tests.
	tr := newTree(t)
	var out bytes.Buffer
	r := &runner{client: client{addr: "127.0.0.1:1", silence: time.Second}, root: tr.root, limit: 60, out: &out}
	if status := r.run(tr.wd, os.Args[0], []string{"-test.run", "NoSuchTest"}); status != 0 || out.String() != "testing: warning: no tests to run\nPASS\n" {
		t.Errorf("status %d, output %q", status, out.String())
	}
}
