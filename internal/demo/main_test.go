package demo_test

import (
	"os"
	"testing"

	"github.com/cgwarden/cgwarden/internal/cli"
	"github.com/cgwarden/cgwarden/internal/demo"
)

// envCLI makes the test binary run as cgwarden itself (cli.Main), so the
// tests can run `cgwarden demo` as a subprocess where no Go toolchain is
// (the cgroup v2 guest runs test binaries only).
const envCLI = "CGWARDEN_DEMO_TEST_CLI"

// TestMain lets the test binary be cgwarden: for the demo's children,
// which Run starts by re-executing its own binary (here the test binary)
// with demo.ChildCommand, and for the subprocess tests.
func TestMain(m *testing.M) {
	if os.Getenv(envCLI) == "1" || (len(os.Args) > 1 && os.Args[1] == demo.ChildCommand) {
		os.Exit(cli.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}
