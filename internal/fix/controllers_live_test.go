package fix

import (
	"path"
	"strings"
	"testing"
)

// TestRevertKeepsControllersOthersUse (cgroup v2): adopt enables cpu,
// memory and pids in the pod cgroup's subtree_control. If, after the
// apply, the runtime places a container of the pod where it belongs (a
// new child of the pod that uses those controllers: here a cpu.weight of
// its own), a revert that disabled them again would silently strip that
// container of its limits. The revert leaves them enabled, says why, and
// still disables them when no new child appeared (TestRevertRestoresTree).
func TestRevertKeepsControllersOthersUse(t *testing.T) {
	f := newFixture(t)
	if !f.s.V2() {
		t.Skip("cgroup v1 has no subtree_control; the v2 lane runs this")
	}
	f.seed()
	src := literalRel(uidA, idA)
	f.s.Start(src, "sleep", "600")
	podDir := path.Join(f.s.Points[0], f.s.Name, podRel(uidA))
	if b, err := f.s.Host.ReadFile(path.Join(podDir, "cgroup.subtree_control")); err != nil || strings.TrimSpace(string(b)) != "" {
		t.Fatalf("pod cgroup's subtree_control before the fix: %q, %v; want it empty", b, err)
	}
	if _, err := f.e.Apply(Options{}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	// The runtime's own, properly placed container, created after the fix.
	other := podRel(uidA) + "/cri-containerd-" + idB + ".scope"
	f.s.Mkdir(other)
	f.s.Write(other, "cpu.weight", "250")
	f.s.Start(other, "sleep", "600")

	rep, err := f.e.Revert(false)
	if err != nil {
		t.Fatalf("revert: %v", err)
	}
	if w, err := f.s.Host.ReadFile(path.Join(f.s.Points[0], f.s.Name, other, "cpu.weight")); err != nil || strings.TrimSpace(string(w)) != "250" {
		t.Fatalf("after the revert the runtime's container has cpu.weight %q (%v), want its own 250: the revert disabled a controller it uses", w, err)
	}
	failed := rep.Failed()
	if len(failed) != 1 || failed[0].Op.File() != "cgroup.subtree_control" || !strings.Contains(failed[0].Note, path.Base(other)) {
		t.Errorf("revert should report the controllers left enabled because of %s; reported %+v", path.Base(other), failed)
	}
}
