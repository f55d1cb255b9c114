package realtest

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestScratchAccountsABurner checks the harness itself on the live kernel: a
// burner started in a scratch cgroup is charged to that cgroup from its
// first instruction, and the scratch is gone after cleanup.
func TestScratchAccountsABurner(t *testing.T) {
	s := NewScratch(t)
	s.Mkdir("a")
	b := s.Burn("a", 0)
	time.Sleep(300 * time.Millisecond)
	procCPU, err := ProcCPUSeconds(b.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var cg float64
	if s.V2() {
		for _, l := range strings.Split(s.Read("a", "cpu.stat"), "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				n, _ := strconv.ParseFloat(v, 64)
				cg = n / 1e6
			}
		}
	} else {
		n, _ := strconv.ParseFloat(strings.TrimSpace(s.Read("a", "cpuacct.usage")), 64)
		cg = n / 1e9
	}
	if procCPU < 0.1 {
		t.Fatalf("burner used only %.3fs of CPU in 300ms", procCPU)
	}
	// The cgroup saw at least what /proc saw (tick rounding aside).
	if cg < procCPU*0.9-0.02 {
		t.Fatalf("cgroup charged %.3fs, /proc says %.3fs", cg, procCPU)
	}
}
