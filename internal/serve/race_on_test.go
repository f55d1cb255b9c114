//go:build race

package serve_test

// raceEnabled: this test binary is built with -race (the race lane), which
// runs its server (the test binary acting as cgwarden) several times
// slower, niced, beside the cluster lane (scripts/test).
const raceEnabled = true
