package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/examples"
)

// TestReportHTMLGolden writes `cgwarden report --html` for every example
// snapshot, with its pods (and VMs) file when it has one, and compares the
// page with testdata/golden/report-<name>.html.
func TestReportHTMLGolden(t *testing.T) {
	for _, name := range examples.Names() {
		t.Run(name, func(t *testing.T) {
			args := []string{"report", "--snapshot", examples.Prefix + name}
			for _, f := range []struct{ flag, suffix string }{{"--pods", ".pods.json"}, {"--vms", ".vms.json"}} {
				p := "../examples/snapshots/" + name + f.suffix
				if _, err := os.Stat(p); err == nil {
					args = append(args, f.flag, p)
				}
			}
			out := filepath.Join(t.TempDir(), "report.html")
			stdout, stderr, code := run(append(args, "--html", out)...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			if stdout != "" {
				t.Errorf("report wrote to stdout: %q", stdout)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(b), "<!DOCTYPE html>") {
				t.Errorf("not an HTML page: %.80q", b)
			}
			golden(t, "report-"+name+".html", b)
		})
	}
}

// TestReportNeedsHTML: report writes only HTML, so --html is required.
func TestReportNeedsHTML(t *testing.T) {
	_, stderr, code := run("report", "--snapshot", "example:seed-003-k3s-spin")
	if code != 2 || !strings.Contains(stderr, "--html FILE is required") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}
