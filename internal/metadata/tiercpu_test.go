package metadata

import (
	"strings"
	"testing"
)

// --max-tier-cpu, as serve and fix both parse it.
func TestTierCPU(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{"2", 2000, false}, {"1500m", 1500, false}, {"8192", 8192000, false},
		{"0", 0, true}, {"-1", 0, true}, {"8193", 0, true}, {"two", 0, true}, {"1e9999", 0, true},
	} {
		got, err := TierCPU(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("TierCPU(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.bad)
		}
		if err != nil && !strings.Contains(err.Error(), "--max-tier-cpu") {
			t.Errorf("TierCPU(%q): error %q does not name the flag", c.in, err)
		}
	}
}
