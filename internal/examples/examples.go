package examples

import (
	"embed"
	"io/fs"
	"strings"
)

//go:embed snapshots/*.txtar
var snapshots embed.FS

// Prefix selects an embedded snapshot in a --snapshot argument.
const Prefix = "example:"

// Names lists the embedded snapshots.
func Names() []string {
	ents, _ := fs.ReadDir(snapshots, "snapshots")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".txtar"))
	}
	return out
}

// Open returns the text of an embedded snapshot.
func Open(name string) ([]byte, bool) {
	b, err := snapshots.ReadFile("snapshots/" + name + ".txtar")
	return b, err == nil
}
