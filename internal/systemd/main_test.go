package systemd_test

import (
	"os"
	"testing"
)

// envRole names the role the test binary plays when a test re-executes
// it (read only here, in the test binary's main).
const envRole = "CGWARDEN_SYSTEMD_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(envRole) {
	case roleAgent:
		os.Exit(agentChild())
	}
	os.Exit(m.Run())
}
