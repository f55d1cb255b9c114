package modversions

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"golang.org/x/mod/modfile"
)

// build is the module every other is compared with: the cluster lane's
// one build, whose versions are Kubernetes'.
const build = "test/cluster/build"

// others are the modules that share its packages: cgwarden itself and the
// test modules compiled in the same run (the metrics-server modules are
// left out: metrics-server v0.8.0 needs the k8s.io v0.33 libraries it was
// released with).
var others = []string{".", "test/scale", "test/cluster", "deploy/test", "test/cluster/usecshim"}

// allowed are the versions that may differ, each with why.
var allowed = map[string]map[string]string{
	"deploy/test": {
		// Helm v3.22.0 requires v3.5.0; only Helm's packages import it.
		"github.com/Masterminds/semver/v3": "Helm v3.22.0 requires v3.5.0",
	},
}

// versions reads a go.mod: each required module's version, or the
// version a replace directive gives it instead.
func versions(t *testing.T, dir string) map[string]string {
	t.Helper()
	p := filepath.Join("..", "..", dir, "go.mod")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse(p, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := map[string]string{}
	for _, r := range f.Require {
		v[r.Mod.Path] = r.Mod.Version
	}
	for _, r := range f.Replace {
		if _, ok := v[r.Old.Path]; ok && r.New.Version != "" {
			v[r.Old.Path] = r.New.Version
		}
	}
	return v
}

func TestSharedModulesAtOneVersion(t *testing.T) {
	want := versions(t, build)
	for _, dir := range others {
		got := versions(t, dir)
		var shared int
		var paths []string
		for p := range got {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			w, ok := want[p]
			if !ok {
				continue
			}
			shared++
			if got[p] == w {
				if why, ok := allowed[dir][p]; ok {
					t.Errorf("%s: %s is at %s as in %s: its exception (%s) is no longer needed", dir, p, w, build, why)
				}
				continue
			}
			if _, ok := allowed[dir][p]; ok {
				continue
			}
			t.Errorf("%s/go.mod requires %s %s, %s/go.mod %s: one of them must move, or the lanes compile it and everything above it twice", dir, p, got[p], build, w)
		}
		// The comparison means something only if the modules share most
		// of what they require.
		if shared < len(got)/2 {
			t.Errorf("%s shares %d of its %d modules with %s: fewer than half", dir, shared, len(got), build)
		}
	}
}
