package agent

import (
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/podsource"
)

// The holder's own size check: what the user gave; else 250 ms where sizes
// can change under a pod between the loop's scans (the Kubernetes API:
// annotations, live VMs; a pods or VMs file rewritten), and never where
// they cannot (the CRI: a sandbox's annotations are fixed when it is made;
// no pod source and no VMs file), the offered scans carrying them.
func TestSizeCheckFollowsThePodSource(t *testing.T) {
	for _, c := range []struct {
		given   time.Duration
		source  string
		vmsFile string
		want    time.Duration
	}{
		{0, podsource.Kubernetes, "", hold.DefaultCheck},
		{0, podsource.File, "", hold.DefaultCheck},
		{0, "given", "", hold.DefaultCheck},
		{0, podsource.CRI, "", hold.NoCheck},
		{0, podsource.CRI, "/vms.json", hold.NoCheck}, // the loop reads the file at every scan
		{0, podsource.None, "", hold.NoCheck},
		{0, podsource.None, "/vms.json", hold.DefaultCheck},
		{time.Second, podsource.CRI, "", time.Second}, // the user's choice wins
		{100 * time.Millisecond, podsource.Kubernetes, "", 100 * time.Millisecond},
	} {
		if got := sizeCheck(c.given, c.source, c.vmsFile); got != c.want {
			t.Errorf("sizeCheck(%v, %q, %q) = %v, want %v", c.given, c.source, c.vmsFile, got, c.want)
		}
	}
}
