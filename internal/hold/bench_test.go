package hold_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHoldSteadyState measures the weight holder's CPU per second,
// in the agent (`serve --fix`), on 60 sized BestEffort pods whose weights
// it holds (121 target files: 60 pods, 60 VM containers, the tier), with
// nothing overwriting them: the cost of being there. The baseline, in the same run, is the naive way to
// hold them without events: reading the 121 files once a second.
// Figures: cpu-ms/s of each, and their ratio. Each b.N is one second.
func BenchmarkHoldSteadyState(b *testing.B) {
	s := realtest.NewScratch(b)
	sizes := make([]int64, 60)
	for i := range sizes {
		sizes[i] = int64(250 * (1 + i%16))
	}
	tree := realtest.NewVMTree(s, 500, sizes...)
	lister := &pods{}
	lister.set(tree.Pods())
	o := fixOptions(s.Name, lister, b.TempDir(), weightRules...)
	// The agent's node loop scans once a minute here: its scans are not
	// the holder's cost (the agent's own figures are in
	// docs/benchmarks.md). The pods are read every 250 ms, as from a pods
	// file (hold.DefaultCheck).
	o.MaxTierCPU, o.Interval = "1000", time.Minute
	a, _ := startAgent(b, o)
	poll.Every(10*time.Millisecond).UntilTrue(b, 30*time.Second, "the holder's first plan", func() bool { return planned(b, a) })
	time.Sleep(time.Second) // the first plan's writes and scan are not the steady state
	var files []string
	for _, vm := range tree.VMs {
		files = append(files, s.Path(vm.Rel, tree.WeightFile()), s.Path(vm.CtrRel, tree.WeightFile()))
	}
	files = append(files, s.Path(realtest.Kube+"/besteffort", tree.WeightFile()))
	b.ResetTimer()
	var holdCPU, pollCPU time.Duration
	for i := 0; i < b.N; i++ {
		// The holder alone for a second.
		c0 := cpuTime()
		time.Sleep(time.Second)
		holdCPU += cpuTime() - c0
		// The baseline: one pass over the 121 files (what polling once a
		// second costs per second).
		c0 = cpuTime()
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil || len(strings.TrimSpace(string(b))) == 0 {
				panic(err)
			}
		}
		pollCPU += cpuTime() - c0
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(holdCPU.Microseconds())/1000/n, "hold-cpu-ms/s")
	b.ReportMetric(float64(pollCPU.Microseconds())/1000/n, "poll-cpu-ms/s")
	if pollCPU > 0 {
		b.ReportMetric(float64(holdCPU)/float64(pollCPU), "x-poll")
	}
}
