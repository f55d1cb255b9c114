package realtest

import (
	"os"
	"testing"
)

// EnvRequire names the variable that turns "cannot run here" into a failure.
const EnvRequire = "CGWARDEN_REQUIRE_REAL"

// Required reports whether real-kernel tests must run (set by .ci/run and by
// the v2 guest).
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// Require skips t (or fails it, when real tests are required) unless the
// process is root and the live cgroup filesystem is mounted read-write.
func Require(t testing.TB) {
	t.Helper()
	if why := unusable(); why != "" {
		Unavailable(t, why)
	}
}

// Unavailable ends t because a real-kernel prerequisite is missing: a skip
// normally, a failure when real tests are required.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("real-kernel test cannot run (%s) and %s=1", why, EnvRequire)
	}
	t.Skipf("real-kernel test skipped: %s (set %s=1 to make this a failure)", why, EnvRequire)
}

func unusable() string {
	if os.Geteuid() != 0 {
		return "not running as root"
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		return "no /sys/fs/cgroup: " + err.Error()
	}
	return ""
}
