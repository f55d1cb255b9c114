package plan

import (
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// Seed 003's pod and its misplaced container, as its cgroup names them.
const (
	seedUID = "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c"
	seedID  = "c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00"
	otherID = "5e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f"
)

// TestAdoptTrustsOnlyTheMetadata: the literal cgroup of seed 003 names
// its pod and container, but a name is anyone's to make (a delegated
// cgroup subtree is enough). It is moved only when the metadata lists the
// ID among the pod's containers (or as its sandbox); an ID the metadata
// says the pod does not have is foreign (attached to no pod, not moved);
// without metadata that can say, it stays with its pod, unconfirmed, and
// is not moved either.
func TestAdoptTrustsOnlyTheMetadata(t *testing.T) {
	pod := func(sandbox string, ids ...string) []metadata.Pod {
		p := metadata.Pod{UID: seedUID, Name: "spin", Namespace: "default", SandboxID: sandbox}
		for i, id := range ids {
			p.Containers = append(p.Containers, metadata.Container{Name: "c" + string(rune('0'+i)), ID: id})
		}
		return []metadata.Pod{p}
	}
	cases := []struct {
		name  string
		pods  []metadata.Pod // nil: no metadata at all
		moved bool
		// foreign: the cgroup is in Node.Foreign; otherwise attached,
		// with Unconfirmed set when why is not "".
		foreign bool
		why     string
	}{
		{name: "listed container (API server)", pods: pod("", seedID), moved: true},
		{name: "listed container among others (CRI)", pods: pod("sb", otherID, seedID), moved: true},
		{name: "the pod's sandbox (CRI)", pods: pod(seedID, otherID), moved: true},
		{name: "not listed, sandbox named (CRI)", pods: pod("sb", otherID), foreign: true},
		{name: "not listed, nothing in the pod cgroup (API server): the sandbox by elimination", pods: pod("", otherID), why: "by elimination"},
		{name: "no metadata", pods: nil, why: "no pod metadata"},
		{name: "metadata without the pod", pods: []metadata.Pod{{UID: "11111111-2222-3333-4444-555555555555", Name: "x"}}, why: "does not know pod"},
		{name: "a container of the pod without an ID yet", pods: pod("", otherID, ""), why: "without an ID"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var meta *metadata.Set
			if c.pods != nil {
				meta = metadata.NewSet(c.pods)
			}
			n, sc := seed003With(t, meta)
			p, _, err := Adopt(Input{Node: n, Places: sc.Places, FS: sc.FS})
			if err != nil {
				t.Fatal(err)
			}
			moved := false
			for _, o := range p.Ops {
				moved = moved || o.Kind == Move && o.Container == seedID
			}
			if moved != c.moved {
				t.Errorf("moved = %v, want %v; plan %+v", moved, c.moved, p)
			}
			foreign := len(n.Foreign) == 1 && n.Foreign[0].Identity.ContainerID == seedID && n.Foreign[0].Identity.Shape == layout.ShapeLiteralPath
			if foreign != c.foreign {
				t.Errorf("foreign = %v (%d foreign cgroups), want %v", foreign, len(n.Foreign), c.foreign)
			}
			var why string
			attached := false
			for _, pd := range n.Pods {
				for _, ct := range pd.Containers {
					if ct.ID == seedID {
						attached, why = true, ct.Unconfirmed
					}
				}
			}
			if attached == c.foreign {
				t.Errorf("attached to its pod = %v, want %v", attached, !c.foreign)
			}
			if (why == "") != (c.why == "") || !strings.Contains(why, c.why) {
				t.Errorf("unconfirmed %q, want %q", why, c.why)
			}
			if c.why != "" && !c.moved && (len(p.Skipped) != 1 || !strings.Contains(p.Skipped[0].Reason, "only its name")) {
				t.Errorf("skipped %+v, want the unconfirmed container skipped with its reason", p.Skipped)
			}
		})
	}
}
