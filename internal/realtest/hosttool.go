package realtest

import (
	"os/exec"
	"testing"
)

// HostTool finds a program a test runs from the host's PATH (promtool,
// prometheus, chromium, go, …) and returns its path; the first of names
// found wins. It is the one place that decides what a missing tool means:
//   - in the v2 lane's guests (InGuest), which have none of these tools
//     and whose kernel does not change what they check, the test skips:
//     the host lane runs it;
//   - otherwise a missing tool skips on a laptop and fails when
//     CGWARDEN_REQUIRE_REAL=1 (.ci/run installs every one: install names
//     the Debian package that brings it).
func HostTool(t testing.TB, install string, names ...string) string {
	t.Helper()
	HostOnly(t, names[0]+" is a host tool")

	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	Unavailable(t, names[0]+" not found on PATH (apt-get install "+install+")")
	return ""
}

// HostOnly skips t in the v2 lane's guests (InGuest): why says what ties
// the test to the host (a host tool, a measurement of the host's own
// speed). The host lane runs it. Nowhere else does it skip.
func HostOnly(t testing.TB, why string) {
	t.Helper()
	if InGuest {
		t.Skipf("in the v2 lane's guest: %s, and the host lane runs this test", why)
	}
}
