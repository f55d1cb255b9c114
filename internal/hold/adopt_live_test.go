package hold_test

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// TestAdoptionFollowsAMisplacingRuntime: the agent's adopter (`serve
// --fix misplaced-container`: it plans from every scan the node loop
// makes) against a runtime that puts every new container in a literal
// "<slice>:cri-containerd:<id>" directory at the top, as the runwasi shim
// does: each new container's process is moved under its pod within a few
// intervals of appearing, container after container; /metrics counts the
// runs and the processes moved, and the journal records each run.
func TestAdoptionFollowsAMisplacingRuntime(t *testing.T) {
	s := realtest.NewScratch(t)
	t.Cleanup(func() { sweepScratch(s) }) // after the agent stops, before the scratch's own cleanup
	uids := []string{"11111111-2222-4333-8444-555555555555", "66666666-7777-4888-9999-aaaaaaaaaaaa"}
	sandboxes := podSlices(s, uids...)
	// The runtime's list of the pods' containers (the CRI's ListContainers
	// as the loop reads it each scan): adoption moves only those.
	listed := map[string][]metadata.Container{}
	lister := &pods{}
	list := func() {
		var ps []metadata.Pod
		for _, uid := range uids {
			ps = append(ps, metadata.Pod{UID: uid, Name: "p" + uid[:4], Namespace: "default", SandboxID: sandboxes[uid], Containers: slices.Clone(listed[uid])})
		}
		lister.set(ps)
	}
	list()
	jdir := t.TempDir()
	o := fixOptions(s.Name, lister, jdir, rules.MisplacedContainer)
	o.Interval = 100 * time.Millisecond
	a, halt := startAgent(t, o)
	runs := func(result string) float64 {
		v, _ := metric(t, a, "cgwarden_adoption_runs_total", map[string]string{"result": result})
		return v
	}

	for i := range 4 {
		uid := uids[i%len(uids)]
		id := fmt.Sprintf("%064x", 0xc0ffee+i)
		listed[uid] = append(listed[uid], metadata.Container{Name: fmt.Sprint("c", i), ID: id})
		list()
		literal := "kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice:cri-containerd:" + id
		s.Mkdir(literal)
		start := time.Now()
		p := s.Start(literal, "sleep", "3600")
		want := path.Join(s.Name, "kubepods.slice", "kubepods-pod"+strings.ReplaceAll(uid, "-", "_")+".slice", "cri-containerd-"+id+".scope")
		poll.Every(10*time.Millisecond).Until(t, time.Until(start.Add(5*time.Second)), fmt.Sprintf("container %d: its process in %s within 5 s", i, want), func() (bool, string, error) {
			cg := cpuCgroup(t, p.Process.Pid)
			return cg == want, "in " + cg, nil
		})
		t.Logf("container %d: adopted %s after %s", i, want, time.Since(start).Round(time.Millisecond))
		// With nothing misplaced now, the next run finds nothing to do;
		// wait for it before the runtime misplaces the next container
		// (without the wait, on a loaded machine, the next container can
		// come before any run saw the node clean).
		clean := runs(hold.AdoptClean)
		poll.Every(10*time.Millisecond).UntilTrue(t, time.Until(start.Add(10*time.Second)), fmt.Sprintf("container %d: a clean adoption run within 10 s after it was made", i), func() bool {
			return runs(hold.AdoptClean) != clean
		})
	}
	halt()
	// /metrics counts the runs that moved the containers and the
	// processes moved (one sleep per container); the runs between
	// containers were clean. (A run can fail here: a child the test forks
	// holds a copy of the journal's lock until it execs, which on a loaded
	// machine outlasts the next run. TestAdoptionCountsFailedRuns counts
	// failures.)
	if got := runs(hold.AdoptAdopted); got < 4 {
		t.Errorf("cgwarden_adoption_runs_total{result=adopted} = %v, want one per container (4)", got)
	}
	if got, _ := metric(t, a, "cgwarden_adoption_processes_moved_total", nil); got < 4 {
		t.Errorf("cgwarden_adoption_processes_moved_total = %v, want at least 4", got)
	}
	if runs := journal.Applies(journalEntries(t, jdir)); len(runs) < 4 {
		t.Errorf("the journal in %s records %d runs, want one per container (4)", jdir, len(runs))
	}
}

// TestAdoptionCountsFailedRuns: while another cgwarden holds the journal
// (a `cgwarden fix` run by hand), every adoption run of a node with a
// misplaced container fails, and /metrics counts them as failed, none
// adopted or clean: what CgwardenAdoptionFailing alerts on. Once the
// journal is free, the next run adopts the container.
func TestAdoptionCountsFailedRuns(t *testing.T) {
	s := realtest.NewScratch(t)
	t.Cleanup(func() { sweepScratch(s) })
	uid := "11111111-2222-4333-8444-555555555555"
	sandboxes := podSlices(s, uid)
	id := fmt.Sprintf("%064x", 0xbad)
	literal := "kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice:cri-containerd:" + id
	s.Mkdir(literal)
	p := s.Start(literal, "sleep", "3600")
	lister := &pods{}
	lister.set([]metadata.Pod{{UID: uid, Name: "p", Namespace: "default", SandboxID: sandboxes[uid], Containers: []metadata.Container{{Name: "c", ID: id}}}})
	jdir := t.TempDir()
	j := journal.New(jdir)
	if err := j.Lock(); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	a, _ := startAgent(t, fixOptions(s.Name, lister, jdir, rules.MisplacedContainer))
	runs := func(result string) float64 {
		v, _ := metric(t, a, "cgwarden_adoption_runs_total", map[string]string{"result": result})
		return v
	}
	// One bound of 20 s for both waits, this one and the adoption's.
	deadline := time.Now().Add(20 * time.Second)
	poll.Every(10*time.Millisecond).Until(t, 20*time.Second, "3 failed runs counted", func() (bool, string, error) {
		n := runs(hold.AdoptFailed)
		return n >= 3, fmt.Sprintf("%v failed runs", n), nil
	})
	if a, c := runs(hold.AdoptAdopted), runs(hold.AdoptClean); a != 0 || c != 0 {
		t.Errorf("adopted %v, clean %v runs counted while the journal was locked; want 0 and 0", a, c)
	}
	if got := len(scrape(t, a)["cgwarden_adoption_runs_total"].GetMetric()); got != 3 {
		t.Errorf("%d cgwarden_adoption_runs_total series, want one per result (3)", got)
	}
	if cg := cpuCgroup(t, p.Process.Pid); cg != path.Join(s.Name, literal) {
		t.Fatalf("the container's process is in %s while the journal was locked, want still in %s", cg, path.Join(s.Name, literal))
	}
	if err := j.Unlock(); err != nil {
		t.Fatal(err)
	}
	poll.Every(10*time.Millisecond).UntilTrue(t, time.Until(deadline), "an adoption run once the journal was free, within the 20 s", func() bool {
		return runs(hold.AdoptAdopted) >= 1
	})
}

// podSlices makes the scratch's kubelet root and the pods' slices of uids
// (systemd driver names), each with its sandbox: a pause-like process,
// started as the containers' processes are (the runtime's children, here
// the test's), in the sandbox's scope. It returns the sandbox IDs by pod.
func podSlices(s *realtest.Scratch, uids ...string) map[string]string {
	s.Mkdir("kubepods.slice")
	sandboxes := map[string]string{}
	for i, uid := range uids {
		slice := "kubepods.slice/kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
		id := fmt.Sprintf("%064x", 0x5a0d+i)
		s.Mkdir(slice)
		s.Mkdir(slice + "/cri-containerd-" + id + ".scope")
		s.Start(slice+"/cri-containerd-"+id+".scope", "sleep", "3600")
		sandboxes[uid] = id
	}
	return sandboxes
}

// cpuCgroup is pid's cgroup in the v1 cpu hierarchy, or the v2 one.
func cpuCgroup(t *testing.T, pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	v2 := ""
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if slices.Contains(strings.Split(parts[1], ","), "cpu") {
			return parts[2]
		}
		if parts[0] == "0" {
			v2 = parts[2]
		}
	}
	return v2
}

// sweepScratch kills every process beneath the scratch and removes every
// directory in it that something else (the engine) made, deepest first.
func sweepScratch(s *realtest.Scratch) {
	for _, p := range s.Points {
		var dirs []string
		var walk func(rel string)
		walk = func(rel string) {
			names, _ := s.Host.ReadDirs(path.Join(p, s.Name, rel))
			for _, n := range names {
				dirs = append(dirs, path.Join(rel, n))
				walk(path.Join(rel, n))
			}
		}
		walk("")
		for _, d := range append([]string{""}, dirs...) {
			b, _ := s.Host.ReadFile(path.Join(p, s.Name, d, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		slices.Reverse(dirs)
		for _, d := range dirs {
			for i := 0; i < 100; i++ {
				if err := s.Host.Rmdir(path.Join(p, s.Name, d)); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}
