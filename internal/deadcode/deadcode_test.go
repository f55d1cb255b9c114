package deadcode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/realtest"
)

// module is the root module's path; deadcode names packages by import
// path, the lists below by their path inside the module.
const module = "github.com/cgwarden/cgwarden/"

// uncalled are the functions that nothing in this module calls, not even
// a test, and that stay: package path inside the module, ".", the name
// as deadcode prints it (Type.Method for a method).
var uncalled = map[string]string{}

// testsOnly are the production functions that no binary reaches, and why
// each stays.
var testsOnly = map[string]string{
	"internal/certs.CA.Issue":                          "the cluster lane's PKI (test/cluster/lab/pki.go, its own module) issues every certificate of the lane with it: one certificate maker",
	"internal/certs.SigningKey":                        "the cluster lane's service-account signing key (test/cluster/lab/pki.go, its own module)",
	"internal/kubectlplugin.Direct.Open":               "the scale lane's opener (test/scale/plugin_test.go, its own module): the plugin's FetchAll against simulated agents dialled directly",
	"internal/kubectlplugin.directSession.DialContext": "Direct's session: the scale lane's opener (test/scale)",
	"internal/kubectlplugin.directSession.Close":       "Direct's session: the scale lane's opener (test/scale)",
	"internal/snapshot.Reseal":                         "the seal's one owner for snapshots edited by hand: `go test ./internal/examples -run TestEmbeddedSealed -update` reseals the embedded examples with it",
}

// testSupport are packages of this module for tests alone: no binary
// calls them, by design.
var testSupport = map[string]string{
	"internal/poll":     "the tests' one bounded wait for a condition (poll.Until)",
	"internal/realtest": "scratch cgroups and the skip-or-fail rule of real-kernel tests",
}

// TestEveryFunctionIsCalled: every function of the module is called by a
// binary or a test.
func TestEveryFunctionIsCalled(t *testing.T) {
	check(t, "a binary or a test", uncalled, nil, "-test", "./...")
}

// TestNoProductionCodeForTestsOnly: every production function of the
// module is reachable from a binary; one that only tests call is either
// deleted with its tests or on testsOnly with the reason.
func TestNoProductionCodeForTestsOnly(t *testing.T) {
	check(t, "a binary", testsOnly, testSupport, "./...")
}

// check runs `go tool deadcode -json args...` from the module's root
// and fails t for every unreachable function not on allowed (and not in
// a package of skip), and for every entry of allowed that is reachable
// now or gone.
func check(t *testing.T, roots string, allowed, skip map[string]string, args ...string) {
	// The go command is a host tool: skipped in the v2 lane's guest,
	// required in CI; once found, a failing deadcode is a failure.
	goBin := realtest.HostTool(t, "golang-go, or Go from go.dev", "go")
	cmd := exec.Command(goBin, append([]string{"tool", "deadcode", "-json"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go tool deadcode %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	dead, err := parse(out)
	if err != nil {
		t.Fatalf("go tool deadcode %s: %v", strings.Join(args, " "), err)
	}
	var bad []string
	for name, where := range dead {
		pkg, _, _ := strings.Cut(name, ".")
		if _, ok := skip[pkg]; ok {
			continue
		}
		if _, ok := allowed[name]; !ok {
			bad = append(bad, where+": "+name)
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("no path from %s reaches these functions (go tool deadcode %s): delete them, with the tests that only test them, or add them to the list in this file with the reason they stay:\n\t%s",
			roots, strings.Join(args, " "), strings.Join(bad, "\n\t"))
	}
	var stale []string
	for name, why := range allowed {
		if _, ok := dead[name]; !ok {
			stale = append(stale, fmt.Sprintf("%s (%s)", name, why))
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("listed but no longer unreachable from %s (called now, or gone): take them off the list:\n\t%s", roots, strings.Join(stale, "\n\t"))
	}
}

// parse reads deadcode's -json output: each unreachable function's name
// (package path inside the module, ".", function) and where it is.
func parse(out []byte) (map[string]string, error) {
	var pkgs []struct {
		Path  string
		Funcs []struct {
			Name     string
			Position struct {
				File      string
				Line, Col int
			}
		}
	}
	if err := json.Unmarshal(out, &pkgs); err != nil {
		return nil, fmt.Errorf("reading its -json output: %w", err)
	}
	dead := map[string]string{}
	for _, p := range pkgs {
		rel, ok := strings.CutPrefix(p.Path, module)
		if !ok {
			return nil, fmt.Errorf("package %s is not in module %s", p.Path, strings.TrimSuffix(module, "/"))
		}
		for _, f := range p.Funcs {
			dead[rel+"."+f.Name] = fmt.Sprintf("%s:%d", f.Position.File, f.Position.Line)
		}
	}
	return dead, nil
}
