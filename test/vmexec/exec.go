package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// client is the host's side: how to reach the guest and how long it may
// be silent.
type client struct {
	addr    string        // the guest daemon's forwarded address: a loopback one
	silence time.Duration // the longest the guest may say nothing
}

// dial connects to the guest: to a loopback address only, since the
// daemon runs, as root, whatever it is sent.
func (c client) dial() (net.Conn, error) {
	host, _, err := net.SplitHostPort(c.addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("-addr %s: not a loopback address (the guest's port is forwarded to the host's loopback only)", c.addr)
	}
	conn, err := net.DialTimeout("tcp", c.addr, c.silence)
	if err != nil {
		return nil, err
	}
	return idleConn{conn, c.silence}, nil
}

// ask sends a job with no binary (ping, poweroff) and waits for its exit
// frame.
func (c client) ask(op string) error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := writeJob(conn, job{Op: op}); err != nil {
		return err
	}
	kind, payload, err := readFrame(conn)
	if err != nil {
		return err
	}
	if kind != frameExit || string(payload) != "0" {
		return fmt.Errorf("the guest answered %s with a %q frame %q", op, kind, payload)
	}
	return nil
}

// runner runs one test binary in the guest for go test.
type runner struct {
	client
	root  string    // the repository's root, which the package's directory is taken relative to
	limit int       // seconds the binary may run (the guest's watchdog)
	down  string    // a file that says the guest was lost, and why; "" for none
	out   io.Writer // where the binary's output goes: go test's pipe
	last  byte      // the last byte written to out
}

// run runs bin with args in the guest, wd being the package's source
// directory, and returns the exit status for vmexec: the binary's, or 1
// when it could not run or the guest was lost.
func (r *runner) run(wd, bin string, args []string) int {
	if r.down != "" {
		if why, err := os.ReadFile(r.down); err == nil {
			r.say("not run: the guest was lost before: %s", bytes.TrimSpace(why))
			return 1
		}
	}
	dir, err := packageDir(r.root, wd)
	if err != nil {
		r.say("%v", err)
		return 1
	}
	if selectsNothing(wd, bin, args) {
		// What the binary itself would say, without sending it: seconds
		// of the guest's emulated network and start-up each (the systemd
		// guests run -test.run Systemd over every real-kernel package).
		fmt.Fprint(r.out, "testing: warning: no tests to run\nPASS\n")
		return 0
	}
	f, err := os.Open(bin)
	if err != nil {
		r.say("%v", err)
		return 1
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		r.say("%v", err)
		return 1
	}
	conn, err := r.dial()
	if err != nil {
		return r.lost("cannot reach the guest at %s: %v", r.addr, err)
	}
	defer conn.Close()
	err = writeJob(conn, job{Op: "run", Dir: dir, Args: args, Limit: r.limit, Size: st.Size()})
	if err == nil {
		_, err = io.CopyN(conn, f, st.Size())
	}
	if err != nil {
		return r.lostOn(err, "sending "+dir+"'s test binary")
	}
	for {
		kind, payload, err := readFrame(conn)
		if err != nil {
			return r.lostOn(err, "running "+dir+"'s test binary")
		}
		switch kind {
		case frameOutput:
			if len(payload) == 0 {
				continue
			}
			if _, err := r.out.Write(payload); err != nil {
				return 1 // go test is gone: nobody to tell
			}
			r.last = payload[len(payload)-1]
		case frameExit:
			status, err := parseExit(payload)
			if err != nil {
				return r.lost("%v", err)
			}
			return status
		default:
			return r.lost("a %q frame from the guest", kind)
		}
	}
}

// selectsNothing reports whether args' -test.run selects none of bin's
// tests, as the binary lists them on the host (-test.list; the packages'
// TestMains do nothing of their own without their child roles' env). A
// pattern with a subtest part, an error or no -test.run: false, and the
// binary runs in the guest.
func selectsNothing(wd, bin string, args []string) bool {
	run, ok := "", false
	for i, a := range args {
		if v, found := strings.CutPrefix(a, "-test.run="); found {
			run, ok = v, true
		} else if a == "-test.run" && i+1 < len(args) {
			run, ok = args[i+1], true
		}
	}
	if !ok || run == "" || strings.Contains(run, "/") {
		return false
	}
	// Bounded: a listing that hangs sends the binary to the guest, whose
	// watchdog deals with hangs.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list := exec.CommandContext(ctx, bin, "-test.list", run)
	list.Dir = wd
	out, err := list.Output()
	return err == nil && len(bytes.TrimSpace(out)) == 0
}

// packageDir is wd relative to root, as a slash path: the package's
// directory under /src in the guest.
func packageDir(root, wd string) (string, error) {
	// Both resolved, so that a symlink on either side does not make the
	// package look outside the repository.
	for _, p := range []*string{&root, &wd} {
		resolved, err := filepath.EvalSymlinks(*p)
		if err != nil {
			return "", err
		}
		*p = resolved
	}
	rel, err := filepath.Rel(root, wd)
	if err != nil || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("the package's directory %s is not under -root %s", wd, root)
	}
	return filepath.ToSlash(rel), nil
}

// lostOn reports err, met while doing what, as a stalled guest (nothing
// for the silence bound) or one that went away.
func (r *runner) lostOn(err error, what string) int {
	if isTimeout(err) {
		return r.lost("the guest STALLED: nothing from it for %s while %s (a live guest's watchdog speaks within the package's limit)", r.silence, what)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = errors.New("the connection ended without an exit status")
	}
	return r.lost("the guest WENT AWAY while %s: %v (its console shows why)", what, err)
}

// lost says why the guest was lost, records it in the down file and
// returns the exit status for it.
func (r *runner) lost(format string, a ...any) int {
	why := fmt.Sprintf(format, a...)
	r.say("%s", why)
	if r.down != "" {
		if err := os.WriteFile(r.down, []byte(why+"\n"), 0o644); err != nil {
			r.say("%v", err)
		}
	}
	return 1
}

// say writes a line of vmexec's own to the output, on a line of its own
// even when the binary's output stopped mid-line.
func (r *runner) say(format string, a ...any) {
	msg := "vmexec: " + strings.TrimSpace(fmt.Sprintf(format, a...)) + "\n"
	if r.last != 0 && r.last != '\n' {
		msg = "\n" + msg
	}
	fmt.Fprint(r.out, msg)
	r.last = '\n'
}
