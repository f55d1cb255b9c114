package serve

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// The probes of a Server fed by the node loop (stuck, stale, failing
// scans, metadata failures, standby) are tested through the loop itself:
// internal/agent/loop_test.go.

// A snapshot is fed once and no loop runs: it never goes stale.
func TestHealthSnapshotNeverStale(t *testing.T) {
	clock := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := feedExampleTo(t, Config{Interval: 10 * time.Second, Clock: clock}, "seed-003-k3s-spin", nil).Handler()
	clock.SetTime(clock.Now().Add(24 * time.Hour))
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body, _ := get(t, h, path); code != 200 || body != "ok\n" {
			t.Errorf("a day later: %s %d %q", path, code, body)
		}
	}
}
