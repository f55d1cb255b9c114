package agent

import (
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/podsource"
)

// The holder's size check: what the user gave; else 250 ms where sizes
// can change under a pod (the Kubernetes API: annotations, live VMs; a
// pods file rewritten), and the scan interval where they cannot (the
// CRI: a sandbox's annotations are fixed when it is made).
func TestSizeCheckFollowsThePodSource(t *testing.T) {
	for _, c := range []struct {
		given    time.Duration
		source   string
		interval time.Duration
		want     time.Duration
	}{
		{0, podsource.Kubernetes, 10 * time.Second, hold.DefaultCheck},
		{0, podsource.File, 10 * time.Second, hold.DefaultCheck},
		{0, podsource.CRI, 10 * time.Second, 10 * time.Second},
		{0, podsource.CRI, 50 * time.Millisecond, hold.DefaultCheck}, // never faster than the default
		{time.Second, podsource.CRI, 10 * time.Second, time.Second},  // the user's choice wins
		{100 * time.Millisecond, podsource.Kubernetes, 10 * time.Second, 100 * time.Millisecond},
	} {
		if got := sizeCheck(c.given, c.source, c.interval); got != c.want {
			t.Errorf("sizeCheck(%v, %q, %v) = %v, want %v", c.given, c.source, c.interval, got, c.want)
		}
	}
}
