package agent_test

import (
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/agent"
	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// notifyingLister is a lister that says when its pods change, as the
// Kubernetes source's informer does.
type notifyingLister struct {
	*lister
	changes *metadata.Changes
}

func (n notifyingLister) Changes() *metadata.Changes { return n.changes }

// processCPU is the CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runs counts BenchmarkIdleFixModeSizeCheck's iterations across -count
// runs, to alternate the order of its two agents.
var runs int

// BenchmarkIdleFixModeSizeCheck: the fix-mode agent idle at 60 sized
// pods on a live scratch tree (the default 10 s interval), once with a
// pod source that cannot say when it changes (the holder reads the sizes
// every 250 ms, hold.DefaultCheck: what the Kubernetes source had until
// 3 December) and once with one that notifies (hold.NoCheck: the sizes
// read on its notifications, none while idle). Reported: this process's
// CPU per second of each idle window and their ratio, measured in the
// same run.
//
//	CGWARDEN_REQUIRE_REAL=1 go test ./internal/agent -run '^$' -bench BenchmarkIdleFixModeSizeCheck -benchtime 1x -count 4 -v
func BenchmarkIdleFixModeSizeCheck(b *testing.B) {
	s := realtest.NewScratch(b)
	sizes := make([]int64, 60)
	for i := range sizes {
		sizes[i] = 1000
	}
	tree := realtest.NewVMTree(s, 500, sizes...)
	pods := &lister{}
	pods.set(tree.Pods())
	sum := uint64(fairness.MinShares)
	for _, p := range tree.VMs {
		sum += fairness.MilliCPUToShares(p.MilliCPU)
	}
	target := tree.PodWeight(sum)
	const window = 30 * time.Second
	idle := func(name string, l metadata.Lister) float64 {
		o := &agent.Options{Listen: "127.0.0.1:0", Interval: 10 * time.Second,
			Fix: []string{"size-blind-weights", "besteffort-starvation"}, JournalDir: b.TempDir(),
			MaxTierCPU: "100", HostRoot: "/", Base: s.Name, Lister: l, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			TrustSizes: "default"}
		a := completeAgent(b, o)
		stop := a.Start(b.Context())
		defer func() { stop(); a.Close() }()
		poll.Every(50*time.Millisecond).Until(b, 30*time.Second, fmt.Sprintf("%s: the tier at %d", name, target), func() (bool, string, error) {
			w := tree.Weight(realtest.Kube + "/besteffort")
			return w == target, fmt.Sprintf("the tier at %d", w), nil
		})
		time.Sleep(2 * time.Second) // the first plan's writes and events settle
		c0, t0 := processCPU(b), time.Now()
		time.Sleep(window)
		perSec := float64((processCPU(b) - c0).Microseconds()) / 1000 / time.Since(t0).Seconds()
		b.Logf("%s: %.3f CPU-ms/s idle over %v", name, perSec, window)
		return perSec
	}
	for i := range b.N {
		var timer, notified float64
		// Both orders, in case the first agent leaves the second a warmer
		// (or colder) node: run with -count 2 or more.
		if (i+runs)%2 == 0 {
			timer = idle("250 ms size check (a source that does not notify)", pods)
			notified = idle("sizes read on notifications", notifyingLister{pods, metadata.NewChanges()})
		} else {
			notified = idle("sizes read on notifications", notifyingLister{pods, metadata.NewChanges()})
			timer = idle("250 ms size check (a source that does not notify)", pods)
		}
		runs++
		b.ReportMetric(timer, "timer-cpu-ms/s")
		b.ReportMetric(notified, "notified-cpu-ms/s")
		b.ReportMetric(notified/timer, "ratio")
	}
}
