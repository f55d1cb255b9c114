package realtest

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/mounts"
)

// Scratch is a uniquely named cgroup a test owns, created in every
// hierarchy the test needs (v1: cpu, cpuacct, memory, pids; v2: the unified
// hierarchy with those controllers enabled). Everything beneath it is the
// test's; nothing above it is ever written. Cleanup kills the processes the
// test started and removes every directory it created, even when the test
// fails.
type Scratch struct {
	t     testing.TB
	Host  *cgroupfs.Host
	Table mounts.Table
	// Name is the scratch cgroup's path inside each hierarchy: the test
	// process's PID and random hex, e.g. "/cgwarden-test-4242-1a2b3c4d"
	// (the PID lets a later test sweep it if this one is killed).
	Name string
	// Points are the mount points the scratch lives in.
	Points []string
	v2     bool
	dirs   []string // relative paths created, in creation order
	procs  []*exec.Cmd
}

// NewScratch creates the scratch cgroup. It calls Require first.
func NewScratch(t testing.TB) *Scratch {
	t.Helper()
	Require(t)
	host, err := cgroupfs.OpenHost("/")
	if err != nil {
		Unavailable(t, err.Error())
	}
	raw, err := host.ReadFile("/proc/self/mountinfo")
	if err != nil {
		Unavailable(t, err.Error())
	}
	table, err := mounts.Parse(string(raw))
	if err != nil {
		t.Fatalf("parse mountinfo: %v", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	s := &Scratch{t: t, Host: host, Table: table, Name: "/" + mounts.ScratchName(scratchPrefix, os.Getpid(), b)}
	if s.Points, s.v2, err = table.Scratch(host.ReadFile, "the test"); err != nil {
		Unavailable(t, err.Error())
	}
	host.AllowWrites(s.Points...)
	s.sweep()
	t.Cleanup(s.cleanup)
	s.Mkdir("")
	return s
}

// V2 reports whether the scratch lives in a cgroup v2 hierarchy.
func (s *Scratch) V2() bool { return s.v2 }

// Path is the host path of rel (relative to the scratch cgroup) in the
// hierarchy that holds file (e.g. "cpu.shares" lives in the cpu mount).
func (s *Scratch) Path(rel, file string) string {
	return path.Join(s.Table.FileMount(file), s.Name, rel, file)
}

// Cgroup is the cgroup path of rel, as a scan sees it.
func (s *Scratch) Cgroup(rel string) string { return path.Join(s.Name, rel) }

// Mkdir creates rel (relative to the scratch cgroup; "" is the scratch
// itself) in every hierarchy. On v2 it enables cpu, memory and pids for the
// parent's children first, as a runtime does.
func (s *Scratch) Mkdir(rel string) {
	s.t.Helper()
	if s.v2 && rel != "" {
		parent := path.Dir(path.Join("/", rel))
		s.Write(strings.TrimPrefix(parent, "/"), "cgroup.subtree_control", "+cpu +memory +pids")
	}
	for _, p := range s.Points {
		if err := s.Host.Mkdir(path.Join(p, s.Name, rel)); err != nil {
			s.t.Fatalf("scratch mkdir: %v", err)
		}
	}
	s.dirs = append(s.dirs, rel)
}

// Write writes value to file in rel.
func (s *Scratch) Write(rel, file, value string) {
	s.t.Helper()
	if err := s.Host.WriteFile(s.Path(rel, file), []byte(value)); err != nil {
		s.t.Fatalf("scratch write: %v", err)
	}
}

// Read reads file in rel.
func (s *Scratch) Read(rel, file string) string {
	s.t.Helper()
	b, err := s.Host.ReadFile(s.Path(rel, file))
	if err != nil {
		s.t.Fatalf("scratch read: %v", err)
	}
	return string(b)
}

// Start runs argv with every one of its processes inside rel in all
// hierarchies from its first instruction: the child waits on its stdin
// until it has been moved, then execs argv.
func (s *Scratch) Start(rel string, argv ...string) *exec.Cmd {
	s.t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", `read _ && exec "$@"`, "sh"}, argv...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %v: %v", argv, err)
	}
	s.procs = append(s.procs, cmd)
	s.Move(rel, cmd.Process.Pid)
	if _, err := io.WriteString(in, "go\n"); err != nil {
		s.t.Fatalf("release %v: %v", argv, err)
	}
	return cmd
}

// Move puts pid into rel in every hierarchy.
func (s *Scratch) Move(rel string, pid int) {
	s.t.Helper()
	for _, p := range s.Points {
		if err := s.Host.WriteFile(path.Join(p, s.Name, rel, "cgroup.procs"), []byte(strconv.Itoa(pid))); err != nil {
			s.t.Fatalf("move %d into %s: %v", pid, rel, err)
		}
	}
}

// Burn starts a CPU burner in rel, pinned to cpu when cpu >= 0.
func (s *Scratch) Burn(rel string, cpu int) *exec.Cmd {
	argv := []string{"/bin/sh", "-c", "while :; do :; done"}
	if cpu >= 0 {
		if tp, err := exec.LookPath("taskset"); err == nil {
			argv = append([]string{tp, "-c", strconv.Itoa(cpu)}, argv...)
		}
	}
	return s.Start(rel, argv...)
}

func (s *Scratch) cleanup() {
	// Kill every process before waiting for any: a process starved at a
	// low weight needs CPU to exit, which it gets only once its busy
	// siblings are gone too. Newest first, since later burners are usually
	// the heavy ones a test adds against the first.
	for _, c := range slices.Backward(s.procs) {
		if c.Process != nil {
			_ = c.Process.Kill()
		}
	}
	for _, c := range s.procs {
		if c.Process != nil {
			_ = c.Wait()
		}
	}
	// Deepest first; processes may take a moment to leave their cgroups
	// (seconds on a loaded machine: a killed task leaves its pids cgroup
	// only when it is released).
	dirs := slices.Clone(s.dirs)
	slices.SortFunc(dirs, func(a, b string) int {
		return strings.Count(b, "/") - strings.Count(a, "/") + boolInt(a == "") - boolInt(b == "")
	})
	for _, rel := range dirs {
		for _, p := range s.Points {
			if err := s.rmdirPatiently(path.Join(p, s.Name, rel)); err != nil {
				s.t.Errorf("scratch cleanup: %v", err)
			}
		}
	}
	_ = s.Host.Close()
}

// rmdirPatiently removes the cgroup directory full, retrying for 5 s
// while its killed processes leave it (seconds on a loaded machine: a
// killed task leaves its pids cgroup only when it is released); one
// already gone is no error.
func (s *Scratch) rmdirPatiently(full string) error {
	var err error
	for i := 0; i < 250; i++ {
		err = s.Host.Rmdir(full)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ProcCPUSeconds returns utime+stime of pid and its reaped children, from
// /proc/<pid>/stat, in seconds: the independent measure tests compare cgroup
// accounting against.
func ProcCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// fields after the comm: state(0) ... utime(11) stime(12) cutime(13) cstime(14)
	if len(f) < 15 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var ticks float64
	for _, k := range []int{11, 12, 13, 14} {
		v, err := strconv.ParseFloat(f[k], 64)
		if err != nil {
			return 0, err
		}
		ticks += v
	}
	return ticks / 100, nil // USER_HZ is 100 on every Linux ABI cgwarden supports
}
