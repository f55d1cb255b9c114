package failpoint_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/failpoint"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// TestDefaultBuildHasNoFailpoints builds cmd/cgwarden as it ships (no
// tags) and checks that neither the failpoint package's code nor the
// variable that arms it is in the binary. With -tags failpoints it checks
// that the tagged build does hold them, so the check can fail.
func TestDefaultBuildHasNoFailpoints(t *testing.T) {
	goBin := realtest.HostTool(t, "golang-go, or Go from go.dev", "go")
	bin := filepath.Join(t.TempDir(), "cgwarden")
	args := []string{"build", "-o", bin}
	if failpoint.Enabled {
		args = append(args, "-tags", "failpoints")
	}
	build := exec.Command(goBin, append(args, "github.com/cgwarden/cgwarden/cmd/cgwarden")...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	nm, err := exec.Command(goBin, "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	var syms []string
	for _, l := range strings.Split(string(nm), "\n") {
		if strings.Contains(l, "internal/failpoint.") {
			syms = append(syms, strings.TrimSpace(l))
		}
	}
	hasEnv := strings.Contains(string(raw), "CGWARDEN_FAILPOINTS")
	if failpoint.Enabled {
		if len(syms) == 0 || !hasEnv {
			t.Fatalf("the failpoints build holds %d failpoint symbols and the variable: %v; the check sees nothing", len(syms), hasEnv)
		}
		return
	}
	if len(syms) > 0 {
		t.Errorf("the shipped build holds failpoint code:\n%s", strings.Join(syms, "\n"))
	}
	if hasEnv {
		t.Error("the shipped build holds the string CGWARDEN_FAILPOINTS")
	}
}

// TestHitIsInert: without the tag an armed point does nothing.
func TestHitIsInert(t *testing.T) {
	if failpoint.Enabled {
		t.Skip("failpoints build")
	}
	t.Setenv("CGWARDEN_FAILPOINTS", "t/p=panic;t/q=skip")
	if failpoint.Hit("t/p") || failpoint.Hit("t/q") {
		t.Error("Hit reported skip in the default build")
	}
}
