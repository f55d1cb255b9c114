package examples_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

var update = flag.Bool("update", false, "reseal the embedded snapshots (after editing one by hand) and rewrite the seed-000 example from its generator (TestSeed000Generated)")

// Every embedded snapshot is sealed, so replaying one prints no "not
// sealed" warning. An example edited by hand fails here; rerun with
// -update to reseal it (seed-000 is made, sealed, by TestSeed000Generated).
func TestEmbeddedSealed(t *testing.T) {
	for _, name := range examples.Names() {
		raw, _ := examples.Open(name)
		s, err := snapshot.Load(bytes.NewReader(raw))
		if err == nil && s.Sealed {
			continue
		}
		if !*update {
			t.Errorf("%s is not sealed (%v): run go test ./internal/examples -run TestEmbeddedSealed -update", name, err)
			continue
		}
		sealed, err := snapshot.Reseal(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join("snapshots", name+".txtar"), sealed, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
