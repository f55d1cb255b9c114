package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// hostIdle bounds how long the daemon waits on the host: for the next
// bytes of a job, or for room to write output (go test always reads).
const hostIdle = 2 * time.Minute

// leftoverWait is how long the binary's output is read after it exited:
// until every process holding the pipe is gone, but no longer, so that a
// process it left behind cannot hold the daemon.
const leftoverWait = 5 * time.Second

// unkillableWait is how long a killed binary is waited for: one still
// there after it is stuck in the kernel, where no signal reaches it, and
// the daemon goes on to the next job without it (its report above says
// where it is stuck).
const unkillableWait = 30 * time.Second

// guest is the daemon.
type guest struct {
	src     string        // the tree's non-Go files: each package's directory is below it (/src)
	tmp     string        // where the binaries are written (a tmpfs)
	console io.Writer     // the guest's console: a line per job, the watchdog's reports
	sysrq   bool          // on a hang, also show the kernel's blocked tasks (sysrq w): in the guest only
	grace   time.Duration // between the watchdog's SIGQUIT (Go's goroutine dump) and its SIGKILL
}

// serve answers the connections of ln one at a time (one test binary at
// a time, as go test -p 1 sends them) until a poweroff job.
func (g *guest) serve(ln net.Listener) error {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return err
		}
		off := g.handle(idleConn{conn, hostIdle})
		conn.Close()
		if off {
			return nil
		}
	}
}

// handle answers one connection's job and says whether it was poweroff.
func (g *guest) handle(conn net.Conn) (poweroff bool) {
	j, err := readJob(conn)
	if err != nil {
		g.log("a connection from %s brought no job: %v", conn.RemoteAddr(), err)
		return false
	}
	status := 0
	switch j.Op {
	case "ping":
	case "poweroff":
		g.log("powering off")
		poweroff = true
	case "run":
		out := &sender{w: conn, gone: make(chan struct{})}
		status = g.run(conn, out, j)
	default:
		g.log("a job of unknown op %q", j.Op)
		status = 1
	}
	if err := writeExit(conn, status); err != nil {
		g.log("cannot send the exit status %d: %v", status, err)
	}
	return poweroff
}

// run receives a run job's binary from conn and runs it, its output to
// out, and returns its exit status.
func (g *guest) run(conn io.Reader, out *sender, j job) int {
	if !filepath.IsLocal(j.Dir) || j.Size <= 0 || j.Limit <= 0 {
		fmt.Fprintf(out, "vmexec guest: a bad job: dir %q, size %d, limit %d\n", j.Dir, j.Size, j.Limit)
		return 1
	}
	bin := filepath.Join(g.tmp, filepath.Base(j.Dir)+".test")
	if err := receive(conn, bin, j.Size); err != nil {
		fmt.Fprintf(out, "vmexec guest: receiving the test binary: %v\n", err)
		return 1
	}
	defer os.Remove(bin)

	pr, pw, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(out, "vmexec guest: %v\n", err)
		return 1
	}
	defer pr.Close()
	cmd := exec.Command(bin, j.Args...)
	cmd.Dir = filepath.Join(g.src, j.Dir)
	cmd.Env = append(os.Environ(), "CGWARDEN_REQUIRE_REAL=1")
	cmd.Stdout, cmd.Stderr = pw, pw // one pipe: the output in the order it was written
	err = cmd.Start()
	pw.Close()
	if err != nil {
		fmt.Fprintf(out, "vmexec guest: %v\n", err)
		return 1
	}
	t0 := time.Now()
	g.log("%s: running, limit %ds", j.Dir, j.Limit)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		// A failed send (the host gone) ends the copy and closes
		// out.gone: the binary is killed below.
		_, _ = io.Copy(out, pr)
	}()
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // its status is in cmd.ProcessState
		close(exited)
	}()

	watchdog := time.NewTimer(time.Duration(j.Limit) * time.Second)
	defer watchdog.Stop()
	select {
	case <-exited:
	case <-watchdog.C:
		// A binary's own -test.timeout cannot fire when none of its
		// threads can run (a stuck cgroup migration holds the lock that
		// making a thread waits on), so it is watched from here.
		g.report(out, j, cmd.Process.Pid)
		// Collected before the SIGQUIT: once the binary is gone, what it
		// started (burners in process groups of their own, which would
		// eat the next package's CPU) is no longer found below it.
		kids := descendants(cmd.Process.Pid)
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		time.Sleep(g.grace)
		kill(cmd.Process, kids)
		if !waitFor(exited, unkillableWait) {
			return g.abandon(out, pr, copied, j)
		}
	case <-out.gone:
		g.log("%s: the host went away; killing the test binary", j.Dir)
		kill(cmd.Process, descendants(cmd.Process.Pid))
		if !waitFor(exited, unkillableWait) {
			return g.abandon(out, pr, copied, j)
		}
	}
	select {
	case <-copied:
	case <-time.After(leftoverWait):
		fmt.Fprintf(out, "vmexec guest: %s exited, but a process it started still holds its output; not waiting for it\n", j.Dir)
		pr.Close() // ends the copy's read
		<-copied
	}
	status := exitStatus(cmd.ProcessState)
	g.log("%s: exit status %d after %.1fs", j.Dir, status, time.Since(t0).Seconds())
	return status
}

// waitFor says whether done closed within d.
func waitFor(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// abandon gives up on a binary that SIGKILL did not end: it says so,
// stops reading its output and fails the job.
func (g *guest) abandon(out io.Writer, pr io.Closer, copied <-chan struct{}, j job) int {
	fmt.Fprintf(out, "vmexec guest: %s: still there %v after SIGKILL, stuck in the kernel; going on without it\n", j.Dir, unkillableWait)
	g.log("%s: unkillable; abandoned", j.Dir)
	pr.Close() // ends the copy's read
	<-copied
	return 1
}

// receive writes size bytes of r to a new executable file at path; a
// failed transfer leaves no file.
func receive(r io.Reader, path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	_, err = io.CopyN(f, r, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

// exitStatus is a finished process's status as a shell gives it: its exit
// code, or 128 + the signal that killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// kill kills p and the processes kids.
func kill(p *os.Process, kids []int) {
	_ = p.Kill()
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
}

// report shows why the binary pid is stuck, to the host and on the
// console: the state, wait channel and kernel stack of its threads, of
// the processes below it and of every process in uninterruptible sleep;
// then (sysrq) the kernel's own list of blocked tasks, which the kernel
// prints on the console itself, to the host only.
func (g *guest) report(out io.Writer, j job, pid int) {
	var b strings.Builder
	fmt.Fprintf(&b, "VMTEST HANG: %s still running after %ds; its tasks and every task in uninterruptible sleep:\n", j.Dir, j.Limit)
	threads, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*", pid))
	for _, t := range threads {
		task(&b, t)
	}
	procs := processes()
	below := descendants(pid)
	for _, p := range slices.Sorted(maps.Keys(procs)) {
		if p != pid && (slices.Contains(below, p) || strings.HasPrefix(procs[p].state, "D")) {
			task(&b, fmt.Sprintf("/proc/%d", p))
		}
	}
	_, _ = io.WriteString(io.MultiWriter(out, g.console), b.String())
	if !g.sysrq {
		return
	}
	if err := os.WriteFile("/proc/sysrq-trigger", []byte("w"), 0); err != nil {
		fmt.Fprintf(out, "sysrq w: %v\n", err)
	}
	log, err := exec.Command("dmesg").Output()
	if err != nil {
		fmt.Fprintf(out, "dmesg: %v\n", err)
	}
	if i := bytes.LastIndex(log, []byte("sysrq: Show Blocked State")); i >= 0 {
		lines := strings.SplitAfter(string(log[i:]), "\n")
		_, _ = io.WriteString(out, strings.Join(lines[max(0, len(lines)-200):], ""))
	}
}

// task writes one line on the task at dir (/proc/PID or
// /proc/PID/task/TID), its kernel stack indented below it.
func task(b *strings.Builder, dir string) {
	read := func(name string) string {
		data, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(data))
	}
	state := ""
	for _, l := range strings.Split(read("status"), "\n") {
		if strings.HasPrefix(l, "State:") {
			state = strings.Join(strings.Fields(l), " ")
		}
	}
	fmt.Fprintf(b, "  task %s (%s): %s wchan=%s\n", filepath.Base(dir), read("comm"), state, read("wchan"))
	for _, l := range strings.Split(read("stack"), "\n") {
		if l != "" {
			fmt.Fprintf(b, "      %s\n", l)
		}
	}
}

// proc is what /proc/PID/status says of a process.
type proc struct {
	ppid  int
	state string // "R (running)", "D (disk sleep)", ...
}

// processes reads every process's parent and state.
func processes() map[int]proc {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	procs := map[int]proc{}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		data, err := os.ReadFile(d + "/status")
		if err != nil {
			continue // gone since
		}
		var p proc
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "PPid:"); ok {
				p.ppid, _ = strconv.Atoi(strings.TrimSpace(v))
			} else if v, ok := strings.CutPrefix(l, "State:"); ok {
				p.state = strings.TrimSpace(v)
			}
		}
		procs[pid] = p
	}
	return procs
}

// descendants are the processes below pid, by their parents (process
// groups and sessions do not matter: tests start burners in their own).
func descendants(pid int) []int {
	children := map[int][]int{}
	for p, st := range processes() {
		children[st.ppid] = append(children[st.ppid], p)
	}
	var below []int
	for todo := children[pid]; len(todo) > 0; {
		p := todo[0]
		todo = append(todo[1:], children[p]...)
		below = append(below, p)
	}
	return below
}

// log writes a line on the guest's console.
func (g *guest) log(format string, a ...any) {
	fmt.Fprintf(g.console, "vmexec guest: "+format+"\n", a...)
}

// sender sends the binary's output and the watchdog's report to the host
// as output frames, from both at once. Its first failed write closes
// gone (the host went away) and fails every later one.
type sender struct {
	mu   sync.Mutex
	w    io.Writer
	err  error
	gone chan struct{}
}

func (s *sender) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := 0; n < len(p) && s.err == nil; n += maxFrame {
		if s.err = writeFrame(s.w, frameOutput, p[n:min(len(p), n+maxFrame)]); s.err != nil {
			close(s.gone)
		}
	}
	if s.err != nil {
		return 0, s.err
	}
	return len(p), nil
}
