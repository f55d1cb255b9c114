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
	// Wait until the burner has run for a while; on a loaded machine that
	// takes longer than on a quiet one, so wait for CPU, not for time.
	var procCPU float64
	for deadline := time.Now().Add(30 * time.Second); ; {
		time.Sleep(100 * time.Millisecond)
		var err error
		if procCPU, err = ProcCPUSeconds(b.Process.Pid); err != nil {
			t.Fatal(err)
		}
		if procCPU >= 0.2 || time.Now().After(deadline) {
			break
		}
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
	if procCPU < 0.2 {
		t.Fatalf("burner used only %.3fs of CPU in 30s", procCPU)
	}
	// The cgroup saw at least what /proc saw (tick rounding aside).
	if cg < procCPU*0.9-0.02 {
		t.Fatalf("cgroup charged %.3fs, /proc says %.3fs", cg, procCPU)
	}
}
