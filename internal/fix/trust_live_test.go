package fix

import (
	"slices"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// TestAdoptionTrustsOnlyTheMetadata, on the live kernel: pod A runs its
// sandbox and its container idA inside its pod cgroup, as the kubelet's
// layout puts them. Beside the scratch kubelet tree, a cgroup named like a
// misplaced container of pod A ("<slice>:cri-containerd:<id>", the shape
// the runwasi shim makes) holds a process — what anyone with a delegated
// cgroup subtree can make. While the metadata (the API server's pod, which
// lists idA only) does not list its ID, it is foreign: no plan moves it,
// the audit reports it, its process stays where it is. Once the metadata
// lists the ID as a container of pod A, it is adopted into the pod.
func TestAdoptionTrustsOnlyTheMetadata(t *testing.T) {
	f := newFixture(t)
	const (
		sandbox = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
		claimed = "feedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedface"
	)
	f.s.Mkdir("kubepods.slice")
	f.s.Mkdir(podRel(uidA))
	f.s.Mkdir(targetRel(uidA, sandbox))
	f.s.Mkdir(targetRel(uidA, idA))
	f.s.Mkdir(literalRel(uidA, claimed))
	f.s.Start(targetRel(uidA, sandbox), "sleep", "3600")
	f.s.Start(targetRel(uidA, idA), "sleep", "3600")
	intruder := f.s.Start(literalRel(uidA, claimed), "sleep", "3600").Process.Pid

	scan := func(meta *metadata.Set) *inventory.Node {
		t.Helper()
		sc, err := inventory.Open(f.s.Host)
		if err != nil {
			t.Fatal(err)
		}
		sc.Base, sc.Meta = f.s.Name, meta
		n, err := sc.Scan(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Not listed: foreign.
	f.e.Meta = seedMeta()
	n := scan(f.e.Meta)
	if len(n.Foreign) != 1 || n.Foreign[0].Identity.ContainerID != claimed {
		t.Fatalf("foreign cgroups %v, want the one claiming %.12s", n.Foreign, claimed)
	}
	if p := n.Pod(uidA); p == nil || slices.ContainsFunc(p.Containers, func(c *inventory.Container) bool { return c.ID == claimed }) {
		t.Fatalf("pod A: %+v; want it found, without the foreign cgroup", p)
	}
	rep := audit.Run(&audit.Input{Node: n, Meta: f.e.Meta})
	if !slices.ContainsFunc(rep.Findings, func(x audit.Finding) bool {
		return x.Rule == rules.ForeignCgroup && x.Subject.ContainerID == claimed
	}) {
		t.Errorf("no %s finding for the foreign cgroup: %+v", rules.ForeignCgroup, rep.Findings)
	}
	res, err := f.e.Apply(Options{})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if len(res.Plan.Ops) != 0 {
		t.Errorf("a plan for a foreign cgroup: %+v", res.Plan.Ops)
	}
	if got := f.pids(literalRel(uidA, claimed)); !slices.Equal(got, []int{intruder}) {
		t.Errorf("the foreign cgroup holds %v, want its process %d left there", got, intruder)
	}
	if got := f.pids(targetRel(uidA, claimed)); len(got) != 0 {
		t.Errorf("processes %v moved into pod A for a container it does not have", got)
	}

	// Listed: the runtime says pod A has the container; it is adopted.
	f.e.Meta = metadata.NewSet([]metadata.Pod{{UID: uidA, Name: "a", Namespace: "default",
		Containers: []metadata.Container{{Name: "app", ID: idA}, {Name: "late", ID: claimed}}}})
	if n := scan(f.e.Meta); len(n.Foreign) != 0 {
		t.Fatalf("foreign cgroups %v with the ID listed", n.Foreign)
	}
	t.Cleanup(func() { f.e.Revert(true) })
	if _, err := f.e.Apply(Options{}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if got := f.pids(targetRel(uidA, claimed)); !slices.Equal(got, []int{intruder}) {
		t.Errorf("pod A's new container cgroup holds %v, want the adopted process %d", got, intruder)
	}
	if left := f.pids(literalRel(uidA, claimed)); len(left) != 0 {
		t.Errorf("processes %v left in the runtime's cgroup", left)
	}
}
