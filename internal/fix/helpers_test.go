package fix

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// The pod and container of seed 003 (SpinKube on k3s): an empty pod slice
// and a busy literal "<slice>:cri-containerd:<id>" directory at the root.
const (
	uidA = "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c"
	idA  = "c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00"
	uidB = "0f8e3a2b-1c4d-4e5f-9a6b-7c8d9e0f1a2b"
	idB  = "5e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f"
)

// seedMeta is the pods' metadata as the CRI or the API server gives it:
// pod A's container is idA, pod B's idB. Adoption moves only a container
// the metadata confirms.
func seedMeta() *metadata.Set {
	return metadata.NewSet([]metadata.Pod{
		{UID: uidA, Name: "a", Namespace: "default", Containers: []metadata.Container{{Name: "app", ID: idA}}},
		{UID: uidB, Name: "b", Namespace: "default", Containers: []metadata.Container{{Name: "app", ID: idB}}},
	})
}

func under(uid string) string  { return strings.ReplaceAll(uid, "-", "_") }
func podRel(uid string) string { return "kubepods.slice/kubepods-pod" + under(uid) + ".slice" }
func literalRel(uid, id string) string {
	return "kubepods-pod" + under(uid) + ".slice:cri-containerd:" + id
}
func targetRel(uid, id string) string { return podRel(uid) + "/cri-containerd-" + id + ".scope" }

// fixture is a scratch tree on the live kernel with an engine pointed at
// it and a journal of its own.
type fixture struct {
	t       *testing.T
	s       *realtest.Scratch
	e       *Engine
	journal string
}

func newFixture(t *testing.T) *fixture {
	s := realtest.NewScratch(t)
	f := &fixture{t: t, s: s, journal: t.TempDir()}
	f.e = &Engine{FS: s.Host, Base: s.Name, JournalDir: f.journal, Meta: seedMeta()}
	// Runs before the scratch's own cleanup: processes forked by the
	// test's processes and cgroups cgwarden created are not the
	// scratch's to know about.
	t.Cleanup(f.sweep)
	return f
}

// seed builds the seed-003 layout: kubepods.slice with the empty pod
// slice, and the literal misplaced directory at the (scratch) top.
func (f *fixture) seed() {
	f.s.Mkdir("kubepods.slice")
	f.s.Mkdir(podRel(uidA))
	f.s.Mkdir(literalRel(uidA, idA))
}

// dirs lists every directory beneath the scratch in one hierarchy,
// relative to the scratch, parents first.
func (f *fixture) dirs(point string) []string {
	var out []string
	var walk func(rel string)
	walk = func(rel string) {
		names, err := f.s.Host.ReadDirs(path.Join(point, f.s.Name, rel))
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

func (f *fixture) sweep() {
	for round := 0; round < 50; round++ {
		alive := false
		for _, p := range f.s.Points {
			for _, d := range append([]string{""}, f.dirs(p)...) {
				for _, pid := range f.pidsAt(p, d) {
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
	for _, p := range f.s.Points {
		ds := f.dirs(p)
		slices.Reverse(ds)
		for _, d := range ds {
			_ = f.s.Host.Rmdir(path.Join(p, f.s.Name, d))
		}
	}
}

func (f *fixture) pidsAt(point, rel string) []int {
	b, err := f.s.Host.ReadFile(path.Join(point, f.s.Name, rel, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, l := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(l)
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// pids lists the processes in rel in every hierarchy (one list when they
// agree, which is the normal case).
func (f *fixture) pids(rel string) []int {
	var all []int
	for _, p := range f.s.Points {
		for _, pid := range f.pidsAt(p, rel) {
			if !slices.Contains(all, pid) {
				all = append(all, pid)
			}
		}
	}
	slices.Sort(all)
	return all
}

// threads counts the threads left in rel on v1 (tasks), in every
// hierarchy.
func (f *fixture) threads(rel string) int {
	n := 0
	for _, p := range f.s.Points {
		if b, err := f.s.Host.ReadFile(path.Join(p, f.s.Name, rel, "tasks")); err == nil {
			n += len(strings.Fields(string(b)))
		}
	}
	return n
}

// cpuSeconds is the CPU time charged to rel.
func (f *fixture) cpuSeconds(rel string) float64 { return f.s.CPUSeconds(rel) }

func (f *fixture) memory(rel string) uint64 {
	file := "memory.usage_in_bytes"
	if f.s.V2() {
		file = "memory.current"
	}
	n, err := strconv.ParseUint(strings.TrimSpace(f.s.Read(rel, file)), 10, 64)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// procCPU sums /proc's CPU seconds of pids.
func procCPU(t *testing.T, pids []int) float64 {
	t.Helper()
	var sum float64
	for _, p := range pids {
		v, err := realtest.ProcCPUSeconds(p)
		if err != nil {
			t.Fatalf("pid %d: %v", p, err)
		}
		sum += v
	}
	return sum
}

// burner starts a CPU burner pinned to cpu (unless cpu < 0) that, on SIGUSR1, forks a
// second burner (a child the move has to follow).
func (f *fixture) burner(rel string, cpu int) *exec.Cmd {
	script := `trap '(while :; do :; done) &' USR1; while :; do :; done`
	argv := []string{"/bin/sh", "-c", script}
	if tp, err := exec.LookPath("taskset"); err == nil && cpu >= 0 {
		argv = append([]string{tp, "-c", strconv.Itoa(cpu)}, argv...)
	}
	return f.s.Start(rel, argv...)
}

// memUser starts the test binary as a process holding memUserBytes of
// touched memory in rel and waits until rel is charged for it.
func (f *fixture) memUser(rel string) *exec.Cmd {
	f.t.Helper()
	os.Setenv(envRole, roleMemUser)
	cmd := f.s.Start(rel, os.Args[0])
	os.Unsetenv(envRole)
	// Generous: under emulation on a loaded machine touching the pages
	// takes many seconds.
	poll.Every(20*time.Millisecond).Until(f.t, 90*time.Second, fmt.Sprintf("memory user in %s charged %d bytes", rel, memUserBytes), func() (bool, string, error) {
		n := f.memory(rel)
		return n >= memUserBytes, fmt.Sprintf("only %d bytes charged", n), nil
	})
	return cmd
}

// dump renders everything cgwarden may change beneath the scratch: every
// directory in every hierarchy, every file it may write, the processes
// of each cgroup, and which cgroups each of pids is in.
func (f *fixture) dump(pids []int) string {
	files := append(plan.Settings(f.s.V2()), "cgroup.subtree_control", "memory.move_charge_at_immigrate", "cgroup.procs")
	var b strings.Builder
	for _, p := range f.s.Points {
		for _, d := range append([]string{""}, f.dirs(p)...) {
			fmt.Fprintf(&b, "dir %s/%s\n", p, d)
			for _, file := range files {
				if file == "cgroup.procs" {
					fmt.Fprintf(&b, "  procs %v\n", f.pidsAt(p, d))
					continue
				}
				if v, err := f.s.Host.ReadFile(path.Join(p, f.s.Name, d, file)); err == nil {
					fmt.Fprintf(&b, "  %s = %q\n", file, strings.TrimSpace(string(v)))
				}
			}
		}
	}
	for _, pid := range pids {
		c, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			fmt.Fprintf(&b, "pid %d: %v\n", pid, err)
			continue
		}
		fmt.Fprintf(&b, "pid %d:\n%s", pid, c)
	}
	return b.String()
}

// readJournal is the journal of dir as a reader without its lock sees
// it (a dry run): journal.New and Snapshot.
func readJournal(dir string) ([]journal.Entry, error) {
	j := journal.New(dir)
	defer j.Close()
	return j.Snapshot()
}

// lockJournal is the journal of dir, locked: journal.New and Lock (Close
// releases it).
func lockJournal(dir string) (*journal.Journal, error) {
	j := journal.New(dir)
	if err := j.Lock(); err != nil {
		return nil, err
	}
	return j, nil
}

// checkJournal asserts that the journal parses and that every intent is
// settled (done, failed, or undone by a revert), except inDoubt of them.
func checkJournal(t *testing.T, dir string, inDoubt int) []journal.Entry {
	t.Helper()
	entries, err := readJournal(dir)
	if err != nil {
		t.Fatalf("journal does not read back: %v", err)
	}
	doubt := 0
	for _, r := range journal.Applies(entries) {
		for _, s := range r.Steps {
			if s.Status == journal.StatusInDoubt && !s.Undone {
				doubt++
			}
		}
	}
	if doubt != inDoubt {
		t.Fatalf("journal has %d operations in doubt, want %d", doubt, inDoubt)
	}
	return entries
}

func isGone(err error) bool { return errors.Is(err, fs.ErrNotExist) }

func opIndex(t *testing.T, p *plan.Plan, kind plan.Kind, file string) int {
	t.Helper()
	for i, op := range p.Ops {
		if op.Kind == kind && (file == "" || op.File() == file) {
			return i
		}
	}
	t.Fatalf("plan has no %s %s", kind, file)
	return -1
}
