package journal

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's CPU time so far (user + system, every thread).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAppendAfter: the cost of one kubelet reset and one adoption
// (the holder's read of the journal, a run of nine entries, each fsync'd,
// and the compaction it may trigger) after N of them, and the journal's
// size on disk then. Both stay flat in N: what the journal holds is the
// live pods' (50 here), not the history. On tmpfs when the machine has
// one, so that the disk's fsync does not hide the journal's own cost;
// cpu-ns/op is the process's CPU time per op (getrusage), steadier than
// ns/op on a loaded machine.
func BenchmarkAppendAfter(b *testing.B) {
	for _, n := range []int{1000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			c := newChurn(b, shmDir(b), 50)
			for i := range n {
				c.reset(b, i)
				c.adopt(b, i)
			}
			c.maxSize = 0
			i := n
			cpu0 := cpuTime(b)
			for b.Loop() {
				c.reset(b, i)
				c.adopt(b, i)
				i++
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(i-n), "cpu-ns/op")
			b.ReportMetric(float64(c.j.size), "bytes")
			b.ReportMetric(float64(c.maxSize), "max-bytes")
		})
	}
}
