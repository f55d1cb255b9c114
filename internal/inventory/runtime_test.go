package inventory

import (
	"testing"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// TestNodeRuntime: the node's one CRI runtime comes from the metadata's
// container IDs only when they agree; none or several say nothing.
func TestNodeRuntime(t *testing.T) {
	set := func(rts ...string) *metadata.Set {
		var pods []metadata.Pod
		for i, rt := range rts {
			pods = append(pods, metadata.Pod{UID: string(rune('a' + i)), Containers: []metadata.Container{{ID: "x", Runtime: rt}}})
		}
		return metadata.NewSet(pods)
	}
	for _, c := range []struct {
		name string
		meta *metadata.Set
		want string
	}{
		{"no metadata", nil, ""},
		{"one runtime", set("containerd", "", "containerd"), "containerd"},
		{"two runtimes", set("containerd", "docker"), ""},
		{"no schemes", set("", ""), ""},
	} {
		if got := (&Scanner{Meta: c.meta}).nodeRuntime(); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
