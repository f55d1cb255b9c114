package hold

import (
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// TestAdoptionFollowsAMisplacingRuntime: serve's adoption loop (a steady
// engine, as `serve --fix misplaced-container` runs it) against a runtime
// that puts every new container in a literal
// "<slice>:cri-containerd:<id>" directory at the top, as the runwasi shim
// does: each new container's process is moved under its pod within a few
// intervals of appearing, container after container, and the journal
// records each run.
func TestAdoptionFollowsAMisplacingRuntime(t *testing.T) {
	s := realtest.NewScratch(t)
	t.Cleanup(func() { sweepScratch(s) }) // before the scratch's own cleanup
	s.Mkdir("kubepods.slice")
	uids := []string{"11111111-2222-4333-8444-555555555555", "66666666-7777-4888-9999-aaaaaaaaaaaa"}
	for _, uid := range uids {
		s.Mkdir("kubepods.slice/kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice")
	}
	journal := t.TempDir()
	e := &fix.Engine{FS: s.Host, Base: s.Name, JournalDir: journal, Steady: true}
	// The runtime's list of the pods' containers (the CRI's ListContainers
	// as the loop reads it each round): adoption moves only those.
	var mu sync.Mutex
	listed := map[string][]metadata.Container{}
	meta := func(context.Context) (*metadata.Set, error) {
		mu.Lock()
		defer mu.Unlock()
		var pods []metadata.Pod
		for _, uid := range uids {
			pods = append(pods, metadata.Pod{UID: uid, Name: "p" + uid[:4], Namespace: "default", Containers: slices.Clone(listed[uid])})
		}
		return metadata.NewSet(pods), nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	runs := 0
	m := NewAdoptionMetrics()
	go func() {
		defer close(done)
		RunAdoption(ctx, e, meta, 100*time.Millisecond, nil, m, func(*fix.Result) { runs++ })
	}()
	defer func() { cancel(); <-done }()

	for i := range 4 {
		uid := uids[i%len(uids)]
		id := fmt.Sprintf("%064x", 0xc0ffee+i)
		literal := "kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice:cri-containerd:" + id
		mu.Lock()
		listed[uid] = append(listed[uid], metadata.Container{Name: fmt.Sprint("c", i), ID: id})
		mu.Unlock()
		s.Mkdir(literal)
		start := time.Now()
		p := s.Start(literal, "sleep", "3600")
		want := path.Join(s.Name, "kubepods.slice", "kubepods-pod"+strings.ReplaceAll(uid, "-", "_")+".slice", "cri-containerd-"+id+".scope")
		for {
			cg := cpuCgroup(t, p.Process.Pid)
			if cg == want {
				t.Logf("container %d: adopted %s after %s", i, want, time.Since(start).Round(time.Millisecond))
				break
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("container %d: its process is still in %s after 5 s, want %s", i, cg, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// With nothing misplaced now, the next run finds nothing to do;
		// wait for it before the runtime misplaces the next container
		// (without the wait, on a loaded machine, the next container can
		// come before any run saw the node clean).
		clean := testutil.ToFloat64(m.runs.WithLabelValues(AdoptClean))
		for testutil.ToFloat64(m.runs.WithLabelValues(AdoptClean)) == clean {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("container %d: no clean adoption run within 10 s after it was adopted", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	cancel()
	<-done
	if runs < 4 {
		t.Fatalf("%d adoption runs reported, want one per container (4)", runs)
	}
	// /metrics counts the same runs and the processes moved (one sleep per
	// container); the runs between containers were clean. (A run can fail
	// here: a child the test forks holds a copy of the journal's lock
	// until it execs, which on a loaded machine outlasts the next run.
	// TestAdoptionCountsFailedRuns counts failures.)
	if got := testutil.ToFloat64(m.runs.WithLabelValues(AdoptAdopted)); got != float64(runs) {
		t.Errorf("cgwarden_adoption_runs_total{result=adopted} = %v, want %d (the runs reported)", got, runs)
	}
	if got := testutil.ToFloat64(m.moved); got < 4 {
		t.Errorf("cgwarden_adoption_processes_moved_total = %v, want at least 4", got)
	}
	entries, err := os.ReadDir(journal)
	if err != nil || len(entries) == 0 {
		t.Fatalf("journal %s: %v, %d entries", journal, err, len(entries))
	}
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
