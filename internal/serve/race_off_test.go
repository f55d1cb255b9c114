//go:build !race

package serve_test

// raceEnabled: see race_on_test.go.
const raceEnabled = false
