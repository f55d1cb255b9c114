//go:build failpoints

package fix

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/cgwarden/cgwarden/internal/journal"
)

// killedAt runs an apply (or, revert, a revert --all) of the fixture's
// tree in a child process with failpoint spec armed and checks that the
// point fired and SIGKILLed it.
func (f *fixture) killedAt(spec string, revert bool) {
	f.t.Helper()
	stop := "none:-1" // roleApply's hook never stops
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+roleApply, envScratch+"="+f.s.Name, envPoints+"="+strings.Join(f.s.Points, ":"),
		envJournal+"="+f.journal, envStop+"="+stop, "CGWARDEN_FAILPOINTS="+spec)
	if revert {
		cmd.Env = append(os.Environ(), envRole+"="+roleRun, envMode+"=revert", envMeta+"="+f.metaFile(), envScratch+"="+f.s.Name,
			envPoints+"="+strings.Join(f.s.Points, ":"), envJournal+"="+f.journal, "CGWARDEN_FAILPOINTS="+spec)
	}
	out, err := cmd.CombinedOutput()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		f.t.Fatalf("child with %s was not killed by SIGKILL: %v\n%s", spec, err, out)
	}
	point, _, _ := strings.Cut(spec, "=")
	if !strings.Contains(string(out), "cgwarden failpoint "+point+": kill") {
		f.t.Fatalf("child with %s died without the point firing:\n%s", spec, out)
	}
}

func (f *fixture) metaFile() string {
	name := f.t.TempDir() + "/pods.json"
	b := fmt.Sprintf(`[{"UID":%q,"Name":"a","Namespace":"default","Containers":[{"Name":"app","ID":%q}]}]`, uidA, idA)
	if err := os.WriteFile(name, []byte(b), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return name
}

// TestKilledAtEveryFailpoint kills `fix --apply` at each failpoint of an
// apply on the seed-003 tree, and `revert` at each of a revert's; then
// the journal reads back with at most one operation in doubt, an apply
// continues the cut-off run and puts every process in the pod in every
// hierarchy, and a revert brings the tree back exactly.
func TestKilledAtEveryFailpoint(t *testing.T) {
	const procs = 3
	for _, c := range []struct {
		name, spec string
		revert     bool
	}{
		{"before the begin record", "journal/before-append=kill@1", false},
		{"after the first intent", "journal/after-append=kill@2", false},
		{"before the fourth record", "journal/before-append=kill@4", false},
		{"after the first process moved", "fix/mid-move=kill@1", false},
		// The cpu hierarchy's pass done, the memory and pids ones not
		// begun (v1): the runtime's cgroup is empty in one hierarchy only.
		{"between two hierarchies of a move", fmt.Sprintf("fix/mid-move=kill@%d", procs), false},
		{"a setting written, not recorded", "fix/after-write=kill@1", false},
		{"before the first undo", "fix/before-undo=kill@1", true},
		{"after the revert's first record", "journal/after-append=kill@1", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.seed()
			src := literalRel(uidA, idA)
			var pids []int
			for i := 0; i < procs; i++ {
				pids = append(pids, f.s.Start(src, "sleep", "600").Process.Pid)
			}
			before := f.dump(pids)
			if c.revert {
				if _, err := f.e.Apply(Options{}); err != nil {
					t.Fatal(err)
				}
			}
			f.killedAt(c.spec, c.revert)
			checkJournalAtMost(t, f.journal, 1)
			if !c.revert {
				if _, err := f.e.Apply(Options{}); err != nil {
					t.Fatalf("apply after the kill: %v", err)
				}
				for _, pid := range pids {
					if where := cgroupsOutside(t, f, pid, podRel(uidA)); where != "" {
						t.Errorf("after the kill and a second apply process %d is still in %s", pid, where)
					}
				}
			}
			rep, err := f.e.Revert(true)
			if err != nil || len(rep.Failed()) > 0 {
				t.Fatalf("revert: %v %+v", err, rep.Failed())
			}
			if after := f.dump(pids); after != before {
				t.Errorf("tree after kill, recovery and revert differs.\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// checkJournalAtMost asserts that the journal parses and holds at most n
// operations in doubt.
func checkJournalAtMost(t *testing.T, dir string, n int) []journal.Entry {
	t.Helper()
	entries, err := readJournal(dir)
	if err != nil {
		t.Fatalf("journal does not read back after the kill: %v", err)
	}
	doubt := 0
	for _, r := range journal.Applies(entries) {
		for _, s := range r.Steps {
			if s.Status == journal.StatusInDoubt && !s.Undone {
				doubt++
			}
		}
	}
	if doubt > n {
		t.Fatalf("journal has %d operations in doubt, want at most %d", doubt, n)
	}
	return entries
}

// cgroupsOutside returns a cgroup of pid in a hierarchy of the scratch
// that is not beneath rel ("" when every one is).
func cgroupsOutside(t *testing.T, f *fixture, pid int, rel string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && strings.HasPrefix(parts[2], f.s.Name+"/") && !strings.HasPrefix(parts[2], f.s.Name+"/"+rel+"/") {
			return parts[2]
		}
	}
	return ""
}
