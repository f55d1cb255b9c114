package demo

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/stats"
)

// ScratchPrefix starts the name of every scratch cgroup the demo creates.
const ScratchPrefix = "cgwarden-demo-"

// scratch is the demo's own cgroup, in every hierarchy it needs (v1: cpu,
// cpuacct, memory, pids; v2: the unified hierarchy). The host it writes
// through may write only beneath it.
type scratch struct {
	host   *cgroupfs.Host
	table  mounts.Table
	name   string   // "/cgwarden-demo-<pid>-<hex>" (mounts.ScratchName)
	points []string // mount points holding the scratch
	v2     bool
	// swept are earlier demos' scratches that sweep removed; sweepErr
	// says which it could not.
	swept    []string
	sweepErr error
}

// newScratch creates the scratch cgroup under a unique name.
func newScratch() (*scratch, error) {
	host, err := cgroupfs.OpenHost("/")
	if err != nil {
		return nil, err
	}
	raw, err := host.ReadFile("/proc/self/mountinfo")
	if err != nil {
		host.Close()
		return nil, err
	}
	table, err := mounts.Parse(string(raw))
	if err != nil {
		host.Close()
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	s := &scratch{host: host, table: table, name: "/" + mounts.ScratchName(ScratchPrefix, os.Getpid(), b)}
	if s.points, s.v2, err = table.Scratch(host.ReadFile, "the demo"); err != nil {
		host.Close()
		return nil, err
	}
	s.sweep()
	for _, p := range s.points {
		s.host.AllowExact(path.Join(p, s.name))
		s.host.AllowWrites(path.Join(p, s.name))
	}
	if err := s.mkdir(""); err != nil {
		s.remove()
		return nil, err
	}
	return s, nil
}

// sweep removes the scratch cgroups of earlier demos that were killed
// before their cleanup (SIGKILL, a test's timeout): names of the demo's
// form whose PID no process has. A leftover holds no process (the
// burners die with the demo: Pdeathsig) but keeps its heavy weight at the
// hierarchy's root, which the agent's guarantees count as a competitor
// (a VM pod guaranteed 1.5% of its core in a run here). What it removed,
// or could not, is in s.swept.
func (s *scratch) sweep() {
	tried := map[string]bool{}
	for _, p := range s.points {
		names, _ := s.host.ReadDirs(p)
		for _, n := range names {
			pid, ok := mounts.ScratchMaker(n, ScratchPrefix)
			if !ok || tried[n] || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
				continue
			}
			tried[n] = true
			old := &scratch{host: s.host, table: s.table, name: "/" + n, points: s.points}
			for _, q := range s.points {
				s.host.AllowExact(path.Join(q, old.name))
				s.host.AllowWrites(path.Join(q, old.name))
			}
			if err := old.removeTree(); err != nil {
				s.sweepErr = errors.Join(s.sweepErr, fmt.Errorf("the scratch %s of the killed demo process %d: %w", old.name, pid, err))
				continue
			}
			s.swept = append(s.swept, old.name)
		}
	}
}

// at is the host path of rel in hierarchy point.
func (s *scratch) at(point, rel string) string { return path.Join(point, s.name, rel) }

// path is the host path of file in rel, in the hierarchy that holds it.
func (s *scratch) path(rel, file string) string {
	return s.at(s.table.FileMount(file), path.Join(rel, file))
}

// cgroup is rel's cgroup path, as a scan sees it.
func (s *scratch) cgroup(rel string) string { return path.Join(s.name, rel) }

// mkdir creates rel in every hierarchy; on v2 it first enables cpu,
// memory and pids for the parent's children, as a runtime does.
func (s *scratch) mkdir(rel string) error {
	if s.v2 && rel != "" {
		parent := strings.TrimPrefix(path.Dir(path.Join("/", rel)), "/")
		if err := s.write(parent, "cgroup.subtree_control", "+cpu +memory +pids"); err != nil {
			return err
		}
	}
	for _, p := range s.points {
		if err := s.host.Mkdir(s.at(p, rel)); err != nil {
			return fmt.Errorf("scratch: %w", err)
		}
	}
	return nil
}

func (s *scratch) write(rel, file, value string) error {
	if err := s.host.WriteFile(s.path(rel, file), []byte(value)); err != nil {
		return fmt.Errorf("scratch: %w", err)
	}
	return nil
}

func (s *scratch) read(rel, file string) (string, error) {
	b, err := s.host.ReadFile(s.path(rel, file))
	if err != nil {
		return "", fmt.Errorf("scratch: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// move puts pid into rel in every hierarchy.
func (s *scratch) move(rel string, pid int) error {
	for _, p := range s.points {
		if err := s.host.WriteFile(s.at(p, path.Join(rel, "cgroup.procs")), []byte(strconv.Itoa(pid))); err != nil {
			return fmt.Errorf("moving %d into %s: %w", pid, rel, err)
		}
	}
	return nil
}

// cpuSeconds is the CPU time charged to rel.
func (s *scratch) cpuSeconds(rel string) (float64, error) {
	file := "cpuacct.usage"
	if s.v2 {
		file = "cpu.stat"
	}
	return readAs(s, rel, file, func(v string) (float64, error) { return parseCPUSeconds(v, s.v2) })
}

// memoryBytes is the memory charged to rel.
func (s *scratch) memoryBytes(rel string) (uint64, error) {
	file := "memory.usage_in_bytes"
	if s.v2 {
		file = "memory.current"
	}
	return readAs(s, rel, file, stats.ParseUint)
}

// readAs reads rel's file and parses it; a parse error names the file.
func readAs[T any](s *scratch, rel, file string, parse func(string) (T, error)) (T, error) {
	var zero T
	v, err := s.read(rel, file)
	if err != nil {
		return zero, err
	}
	x, err := parse(v)
	if err != nil {
		return zero, fmt.Errorf("%s/%s: %w", rel, file, err)
	}
	return x, nil
}

// dirs lists every directory beneath the scratch in hierarchy point,
// relative to the scratch, parents first: the ones the demo made and the
// ones the fix made.
func (s *scratch) dirs(point string) []string {
	var out []string
	var walk func(rel string)
	walk = func(rel string) {
		names, err := s.host.ReadDirs(s.at(point, rel))
		if err != nil {
			return
		}
		for _, n := range names {
			r := path.Join(rel, n)
			out = append(out, r)
			walk(r)
		}
	}
	walk("")
	return out
}

func (s *scratch) pidsAt(point, rel string) []int {
	b, err := s.host.ReadFile(s.at(point, path.Join(rel, "cgroup.procs")))
	if err != nil {
		return nil
	}
	pids, _ := stats.ParsePIDs(string(b))
	return pids
}

// remove removes the scratch (removeTree) and closes the host.
func (s *scratch) remove() error {
	err := s.removeTree()
	_ = s.host.Close()
	return err
}

// removeTree kills every process left beneath the scratch (all of them
// are the demo's children) and removes every directory beneath it,
// deepest first, then the scratch itself. It returns what it could not
// remove.
func (s *scratch) removeTree() error {
	for round := 0; round < 100; round++ {
		alive := false
		for _, p := range s.points {
			for _, d := range append([]string{""}, s.dirs(p)...) {
				for _, pid := range s.pidsAt(p, d) {
					alive = true
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if !alive {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var errs []error
	for _, p := range s.points {
		ds := append([]string{""}, s.dirs(p)...)
		slices.Reverse(ds)
		for _, d := range ds {
			var err error
			for i := 0; i < 100; i++ {
				err = s.host.Rmdir(s.at(p, d))
				if err == nil || errors.Is(err, fs.ErrNotExist) {
					err = nil
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
