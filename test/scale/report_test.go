package scale

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

var reportMu sync.Mutex

// record logs one measurement and, when CGWARDEN_SCALE_RESULTS names a
// file, appends it there as a JSON line (docs/scale.md is made from
// those).
func record(t *testing.T, what string, fields map[string]any) {
	t.Helper()
	fields["figure"] = what
	fields["test"] = t.Name()
	fields["time"] = time.Now().UTC().Format(time.RFC3339)
	line, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("figure %s", line)
	f := os.Getenv("CGWARDEN_SCALE_RESULTS")
	if f == "" {
		return
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	out, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := fmt.Fprintf(out, "%s\n", line); err != nil {
		t.Fatal(err)
	}
}

// fit is the least-squares line y = a + b·x through the points.
func fit(xs, ys []float64) (a, b float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return sy / n, 0
	}
	b = (n*sxy - sx*sy) / den
	return (sy - b*sx) / n, b
}

// envInt reads an integer from the environment, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// envDuration reads a duration from the environment, or def.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}
