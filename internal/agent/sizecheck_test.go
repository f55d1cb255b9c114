package agent

import (
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/podsource"
)

// The holder's own size check: what the user gave; never where every
// source says when it changes (the Kubernetes API's informers: the holder
// reads the sizes when they notify); else 250 ms where sizes can change
// under a pod between the loop's scans and nothing says so (a pods or VMs
// file rewritten; a lister that does not notify), and never where they
// cannot (the CRI: a sandbox's annotations are fixed when it is made; no
// pod source and no VMs file), the offered scans carrying them.
func TestSizeCheckFollowsThePodSource(t *testing.T) {
	for _, c := range []struct {
		given   time.Duration
		source  string
		vmsFile string
		notify  bool
		want    time.Duration
	}{
		{0, podsource.Kubernetes, "", true, hold.NoCheck},
		{0, podsource.Kubernetes, "", false, hold.DefaultCheck}, // a lister that does not notify (an embedder's)
		{0, podsource.File, "", false, hold.DefaultCheck},
		{0, "given", "", false, hold.DefaultCheck},
		{0, podsource.CRI, "", false, hold.NoCheck},
		{0, podsource.CRI, "/vms.json", false, hold.NoCheck}, // the loop reads the file at every scan
		{0, podsource.None, "", false, hold.NoCheck},
		{0, podsource.None, "/vms.json", false, hold.DefaultCheck},
		{time.Second, podsource.CRI, "", false, time.Second}, // the user's choice wins
		{100 * time.Millisecond, podsource.Kubernetes, "", true, 100 * time.Millisecond},
	} {
		if got := sizeCheck(c.given, c.source, c.vmsFile, c.notify); got != c.want {
			t.Errorf("sizeCheck(%v, %q, %q, %v) = %v, want %v", c.given, c.source, c.vmsFile, c.notify, got, c.want)
		}
	}
}
