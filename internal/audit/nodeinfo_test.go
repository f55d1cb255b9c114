package audit

import (
	"encoding/json"
	"testing"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// TestJSONNodeSaysTheRuntime: the node header of -o json says the
// container runtime the Node object reports when the metadata knows it,
// beside the cgroup version and driver the scan found; unknown (no
// metadata, or metadata without the Node) leaves it out, never "".
func TestJSONNodeSaysTheRuntime(t *testing.T) {
	known := metadata.NewSet(nil)
	known.SetNodeInfo(metadata.NodeInfo{ContainerRuntimeVersion: "containerd://2.4.2"})
	for _, c := range []struct {
		name string
		meta *metadata.Set
		want any
	}{
		{"Node known", known, "containerd://2.4.2"},
		{"Node unknown", metadata.NewSet(nil), nil},
		{"no metadata", nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := v2Node(t, c.meta, cg{path: "/kubepods.slice", weight: 100})
			b, err := json.Marshal(JSON(n, Run(&Input{Node: n, Meta: c.meta})))
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Node map[string]any `json:"node"`
			}
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			got, present := doc.Node["containerRuntimeVersion"]
			if got != c.want || present != (c.want != nil) {
				t.Errorf("containerRuntimeVersion %v (present %v), want %v in %s", got, present, c.want, b)
			}
			if doc.Node["cgroupVersion"] != "v2" || doc.Node["driver"] != "systemd" {
				t.Errorf("node header %v, want cgroup v2 and the systemd driver beside the runtime", doc.Node)
			}
		})
	}
}
