package inventory_test

import (
	"context"
	"errors"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// decoyRig is a pod with a misplaced container and, in a delegated
// subtree beside it, a decoy that copies the container's name: the pod's
// UID and its real container ID, which the pod's metadata lists. The test
// process plays the runtime (the parent of the pod's pause and of the
// container's process, as a shim is); the decoy's process is a tenant's,
// a child of a tenant shell.
type decoyRig struct {
	s                    *realtest.Scratch
	uid, id              string
	pod, literal, decoy  string // cgroups relative to the scratch
	pause, ctr, intruder int
}

func newDecoyRig(t *testing.T, withPause bool) *decoyRig {
	s := realtest.NewScratch(t)
	r := &decoyRig{s: s, uid: "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9", id: strings.Repeat("d3", 32)}
	under := strings.ReplaceAll(r.uid, "-", "_")
	r.pod = "kubepods.slice/kubepods-pod" + under + ".slice"
	r.literal = "kubepods-pod" + under + ".slice:cri-containerd:" + r.id
	r.decoy = "tenant/kubepods-pod" + under + ".slice:cri-containerd:" + r.id
	// The tenant's shell in a leaf of its own: on cgroup v2 a cgroup
	// with children (the decoy) holds no process.
	for _, d := range []string{"kubepods.slice", r.pod, r.literal, "tenant", "tenant/shell", r.decoy} {
		s.Mkdir(d)
	}
	// Runs before the scratch's cleanup: the tenant's orphaned sleep is
	// nobody's child the scratch knows.
	t.Cleanup(func() {
		for _, d := range []string{r.decoy, "tenant/shell"} {
			for _, pid := range pids(s, d) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	if withPause {
		r.pause = s.Start(r.pod, "sleep", "3600").Process.Pid
	}
	r.ctr = s.Start(r.literal, "sleep", "3600").Process.Pid
	shell := s.Start("tenant/shell", "sh", "-c", "sleep 3600 & wait").Process.Pid
	poll.Every(10*time.Millisecond).UntilTrue(t, 5*time.Second, "the tenant shell's sleep", func() bool {
		for _, pid := range pids(s, "tenant/shell") {
			if pid != shell {
				r.intruder = pid
			}
		}
		return r.intruder != 0
	})
	s.Move(r.decoy, r.intruder)
	return r
}

// pids lists the processes of rel in the scratch's first hierarchy.
func pids(s *realtest.Scratch, rel string) []int {
	b, _ := s.Host.ReadFile(path.Join(s.Points[0], s.Name, rel, "cgroup.procs"))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// scan scans the scratch with the pod's metadata: the CRI's or the API
// server's list of its containers, which names the real ID.
func (r *decoyRig) scan(t *testing.T) (*inventory.Scanner, *inventory.Node, *inventory.Pod) {
	t.Helper()
	sc, err := inventory.Open(r.s.Host)
	if err != nil {
		t.Fatal(err)
	}
	sc.Base = r.s.Name
	sc.Meta = metadata.NewSet([]metadata.Pod{{UID: r.uid, Name: "victim", Namespace: "prod",
		Containers: []metadata.Container{{Name: "main", ID: r.id}}}})
	n, err := sc.Scan(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range n.Pods {
		if p.UID == r.uid {
			return sc, n, p
		}
	}
	t.Fatalf("pod %s not in the scan", r.uid)
	return nil, nil, nil
}

// container is the pod's container attached from cgroup rel.
func (r *decoyRig) container(t *testing.T, p *inventory.Pod, rel string) *inventory.Container {
	t.Helper()
	for _, c := range p.Containers {
		if c.Cgroup.Path == r.s.Cgroup(rel) {
			return c
		}
	}
	t.Fatalf("no container of pod %s at %s", p.UID, rel)
	return nil
}

func (r *decoyRig) dirs(rel string) []string {
	var out []string
	for _, p := range r.s.Points {
		out = append(out, path.Join(p, r.s.Name, rel))
	}
	return out
}

// fakeRuntime answers ContainerPID as a CRI runtime would.
type fakeRuntime struct {
	pid int
	err error
}

func (f fakeRuntime) ContainerPID(context.Context, string, bool) (int, error) { return f.pid, f.err }

// TestEvidenceRefusesADecoy: the metadata confirms both cgroups (each
// names the pod and a container the pod has), so by names alone both are
// the container; the runtime's evidence confirms only the real one. With
// pods from the API server (no runtime to ask), the real container's
// process is a child of the process that started the pod's pause; the
// decoy's is not. With the CRI, the runtime's PID is in the real one,
// also when the pod's cgroup holds no process (runwasi's process-less
// sandbox), where the API server's pods alone cannot confirm it (the
// documented limit).
func TestEvidenceRefusesADecoy(t *testing.T) {
	r := newDecoyRig(t, true)
	_, n, p := r.scan(t)
	real, decoy := r.container(t, p, r.literal), r.container(t, p, r.decoy)
	for _, c := range []*inventory.Container{real, decoy} {
		if !c.Misplaced || c.Unconfirmed != "" {
			t.Fatalf("%s: misplaced %v, unconfirmed %q; want a misplaced container the metadata confirms (by its name)", c.Cgroup.Path, c.Misplaced, c.Unconfirmed)
		}
	}
	ev := &inventory.Evidence{FS: r.s.Host}
	if ok, why := ev.Confirm(n, p, real, r.dirs(r.literal)); !ok {
		t.Errorf("API server's pods: the real container refused: %s", why)
	}
	ok, why := ev.Confirm(n, p, decoy, r.dirs(r.decoy))
	if ok {
		t.Fatalf("API server's pods: the decoy %s (pid %d) confirmed", r.decoy, r.intruder)
	}
	if !strings.Contains(why, r.s.Cgroup(r.decoy)) || !strings.Contains(why, "decoy") || !strings.Contains(why, "no CRI runtime") {
		t.Errorf("API server's pods: the decoy's refusal %q does not name the cgroup and what was missing", why)
	}
	t.Logf("refused: %s", why)

	ev.Runtime = fakeRuntime{pid: r.ctr}
	if ok, why := ev.Confirm(n, p, real, r.dirs(r.literal)); !ok {
		t.Errorf("CRI: the real container refused: %s", why)
	}
	if ok, why := ev.Confirm(n, p, decoy, r.dirs(r.decoy)); ok || !strings.Contains(why, "the runtime's PID for it, "+strconv.Itoa(r.ctr)+", is not there") {
		t.Errorf("CRI: the decoy: confirmed %v (%q), want refused, saying the runtime's PID is elsewhere", ok, why)
	}
	ev.Runtime = fakeRuntime{err: errors.New("container is CONTAINER_EXITED, not running")}
	if ok, why := ev.Confirm(n, p, decoy, r.dirs(r.decoy)); ok || !strings.Contains(why, "not running") {
		t.Errorf("CRI without a PID: the decoy: confirmed %v (%q), want refused with the runtime's answer", ok, why)
	}
}

// TestEvidenceWithoutAPause: a pod whose cgroup holds no process (runwasi
// keeps the sandbox process-less): the API server's pods cannot confirm
// the real container (refused, saying so); the CRI's PID can.
func TestEvidenceWithoutAPause(t *testing.T) {
	r := newDecoyRig(t, false)
	_, n, p := r.scan(t)
	real := r.container(t, p, r.literal)
	ev := &inventory.Evidence{FS: r.s.Host}
	if ok, why := ev.Confirm(n, p, real, r.dirs(r.literal)); ok || !strings.Contains(why, "the pod's cgroup holds no process") {
		t.Errorf("API server's pods, empty pod cgroup: confirmed %v (%q), want refused, saying the pod's cgroup holds no process", ok, why)
	}
	ev.Runtime = fakeRuntime{pid: r.ctr}
	if ok, why := ev.Confirm(n, p, real, r.dirs(r.literal)); !ok {
		t.Errorf("CRI, empty pod cgroup: the real container refused: %s", why)
	}
	if ok, _ := ev.Confirm(n, p, r.container(t, p, r.decoy), r.dirs(r.decoy)); ok {
		t.Errorf("CRI, empty pod cgroup: the decoy confirmed")
	}
}

// TestAdoptionPlanLeavesTheDecoy: the adoption plan with the evidence moves
// the real container and not the decoy, which it lists as refused. Without
// the evidence (as before), the plan moves the decoy's processes into the
// pod too.
func TestAdoptionPlanLeavesTheDecoy(t *testing.T) {
	r := newDecoyRig(t, true)
	sc, n, _ := r.scan(t)
	in := plan.Input{Node: n, Places: sc.Places, FS: r.s.Host, Only: []string{rules.MisplacedContainer}, Evidence: &inventory.Evidence{FS: r.s.Host}}
	p, _, err := plan.Adopt(in)
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, o := range p.Ops {
		for _, pr := range o.Pairs {
			sources = append(sources, pr.Source)
		}
	}
	for _, d := range r.dirs(r.decoy) {
		if slices.Contains(sources, d) {
			t.Errorf("the plan moves the decoy's processes from %s into the pod", d)
		}
	}
	if !slices.Contains(sources, r.dirs(r.literal)[0]) {
		t.Errorf("the plan does not move the real container from %s (moves from %v; skipped %+v)", r.dirs(r.literal)[0], sources, p.Skipped)
	}
	i := slices.IndexFunc(p.Skipped, func(s plan.Skip) bool { return s.Refused })
	if i < 0 || p.Skipped[i].Cgroup != r.s.Cgroup(r.decoy) || p.Skipped[i].Container != r.id || p.Skipped[i].Pod != r.uid {
		t.Errorf("skipped %+v, want the decoy %s refused", p.Skipped, r.s.Cgroup(r.decoy))
	}
}
