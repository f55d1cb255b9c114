package agent_test

import (
	"fmt"
	"log/slog"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/agent"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// TestAgentRefusesAnAdoptionDecoy: issue 38's decoy, through the agent as
// `serve --fix misplaced-container` wires it, with pods from a source
// that is not the CRI (as the shipped DaemonSet's API server). A pod's
// misplaced container is adopted; then a tenant with a delegated subtree
// makes a second cgroup with the pod's UID and the container's real ID
// (which the pod's metadata lists) and puts a process of its own in it.
// Before, the adopter moved that process into the pod's container cgroup
// (cgwarden had made it, so it was "owned"): the tenant's process got the
// pod's limits, and a revert would have moved the pod's process out. Now
// the runtime does not confirm the decoy (its process is no child of the
// process that started the pod's), so it stays where it is, the agent
// warns once naming it, and /metrics says one cgroup is refused.
func TestAgentRefusesAnAdoptionDecoy(t *testing.T) {
	s := realtest.NewScratch(t)
	uid, id := "5a1d0e2b-7c3f-4a88-9b11-0d2e4f6a8c90", strings.Repeat("5e", 32)
	under := strings.ReplaceAll(uid, "-", "_")
	pod := "kubepods.slice/kubepods-pod" + under + ".slice"
	literal := "kubepods-pod" + under + ".slice:cri-containerd:" + id
	decoy := "tenant/" + literal
	// The pod's pause in a scope of its own and the tenant's shell in a
	// leaf: on cgroup v2 a cgroup with children holds no process (the
	// adopter makes the container's scope beside the pause's).
	pause := pod + "/cri-containerd-" + strings.Repeat("9a", 32) + ".scope"
	for _, d := range []string{"kubepods.slice", pod, pause, literal, "tenant", "tenant/shell", decoy} {
		s.Mkdir(d)
	}
	// Runs before the scratch's own cleanup: every process under the
	// scratch killed (the tenant's orphan, the adopted container), and the
	// cgroup the adopter made removed.
	t.Cleanup(func() {
		for _, d := range []string{decoy, "tenant/shell", pod + "/cri-containerd-" + id + ".scope", literal, pause} {
			for _, pid := range scratchPIDs(s, d) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		for _, p := range s.Points {
			dir := path.Join(p, s.Name, pod, "cri-containerd-"+id+".scope")
			for i := 0; i < 100; i++ {
				if err := s.Host.Rmdir(dir); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	s.Start(pause, "sleep", "3600") // the pod's pause: the test process is its runtime
	ctr := s.Start(literal, "sleep", "3600").Process.Pid
	pods := &lister{}
	pods.set([]metadata.Pod{{UID: uid, Name: "victim", Namespace: "prod", Containers: []metadata.Container{{Name: "main", ID: id}}}})
	logs := &syncBuffer{}
	o := &agent.Options{Listen: "127.0.0.1:0", Interval: 100 * time.Millisecond, Fix: []string{"misplaced-container"},
		JournalDir: t.TempDir(), HostRoot: "/", Base: s.Name, Lister: pods, TrustSizes: "default",
		Log: slog.New(slog.NewTextHandler(logs, nil))}
	a, _ := startAgent(t, o)

	home := s.Cgroup(pod + "/cri-containerd-" + id + ".scope")
	waitCgroup(t, ctr, home, 10*time.Second, "the real container adopted")

	// The tenant's decoy: a process of a tenant's shell, in a cgroup named
	// like the container.
	shell := s.Start("tenant/shell", "sh", "-c", "sleep 3600 & wait").Process.Pid
	intruder := 0
	poll.Every(10*time.Millisecond).UntilTrue(t, 5*time.Second, "the tenant shell's sleep", func() bool {
		for _, pid := range scratchPIDs(s, "tenant/shell") {
			if pid != shell {
				intruder = pid
			}
		}
		return intruder != 0
	})
	s.Move(decoy, intruder)
	waitMetric(t, a, `(?m)^cgwarden_adoption_refused 1$`, 10*time.Second)
	time.Sleep(10 * o.Interval) // ten more runs
	if cg := cpuCgroupOf(t, intruder); cg != s.Cgroup(decoy) {
		t.Errorf("the tenant's process %d is in %s, want it left in the decoy %s", intruder, cg, s.Cgroup(decoy))
	}
	if cg := cpuCgroupOf(t, ctr); cg != home {
		t.Errorf("the pod's process %d is in %s, want it still in %s", ctr, cg, home)
	}
	log := logs.String()
	warned := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "not adopting a misplaced cgroup the runtime does not confirm") && strings.Contains(l, s.Cgroup(decoy)) {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("the agent warned %d times about the decoy, want once (while it stays):\n%s", warned, log)
	}
}

// scratchPIDs lists the processes of rel in the scratch's first hierarchy.
func scratchPIDs(s *realtest.Scratch, rel string) []int {
	b, _ := s.Host.ReadFile(path.Join(s.Points[0], s.Name, rel, "cgroup.procs"))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// cpuCgroupOf is pid's cgroup in the v1 cpu hierarchy, or the v2 one.
func cpuCgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	v2 := ""
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if slices.Contains(strings.Split(f[1], ","), "cpu") {
			return f[2]
		}
		if f[0] == "0" {
			v2 = f[2]
		}
	}
	return v2
}

// waitCgroup waits until pid is in cgroup cg.
func waitCgroup(t *testing.T, pid int, cg string, timeout time.Duration, what string) {
	t.Helper()
	poll.Every(20*time.Millisecond).Until(t, timeout, what, func() (bool, string, error) {
		now := cpuCgroupOf(t, pid)
		return now == cg, fmt.Sprintf("process %d in %s, want %s", pid, now, cg), nil
	})
}
