package cli

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// ScanNodeDemand is ScanNode plus the demand-aware fair share: with each
// of the two samples it reads the threads' run and wait times (from the
// live host, or from the snapshot when it carries them; leaves without
// them fall back to their usage) and fills Cgroup.DemandCores and
// FairCores. With one sample there is no fair share.
func ScanNodeDemand(o *Options, meta *metadata.Set, interval time.Duration) (*inventory.Node, error) {
	if o.Snapshot != "" {
		s, err := o.loadSnapshot()
		if err != nil {
			return nil, err
		}
		return demandSamples(s.Samples, meta, nil)
	}
	host, err := cgroupfs.OpenHost(o.HostRoot)
	if err != nil {
		return nil, err
	}
	defer host.Close()
	if interval <= 0 {
		return LiveScan(host, meta, 0)
	}
	show := o.progress("measuring CPU and demand")
	now := time.Now()
	return demandSamples([]Sample{{FS: host, Time: now}, {FS: host}}, meta, func(sc *inventory.Scanner, tt *inventory.ThreadTimes, rs *inventory.RunnableSamples) time.Time {
		// Look at the threads' states ten times during the interval.
		for i := 0; i < runnableLooks; i++ {
			show.step(interval, i, runnableLooks)
			sc.SampleRunnable(tt, rs)
		}
		show.done()
		return time.Now()
	})
}

// runnableLooks is how many times the threads' states are looked at
// during a live interval.
const runnableLooks = 10

// demandSamples scans each sample and reads its thread times; a zero
// sample time is filled by wait (the live case sleeps there, looking at
// the threads' states).
func demandSamples(samples []Sample, meta *metadata.Set, wait func(*inventory.Scanner, *inventory.ThreadTimes, *inventory.RunnableSamples) time.Time) (*inventory.Node, error) {
	var prev *inventory.Node
	var prevTT *inventory.ThreadTimes
	var prevSc *inventory.Scanner
	rs := &inventory.RunnableSamples{}
	for _, s := range samples {
		if s.Time.IsZero() && wait != nil {
			s.Time = wait(prevSc, prevTT, rs)
		}
		sc, err := inventory.Open(s.FS)
		if err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		sc.Meta = meta
		n, err := sc.Scan(s.Time)
		if err != nil {
			return nil, err
		}
		at := s.Time
		if wait != nil {
			at = time.Now() // live: when the threads are read, not when the scan began
		}
		tt, errs := sc.ReadThreadTimes(n, at)
		for _, e := range errs {
			slog.Debug("thread times", "err", e)
		}
		if prev != nil {
			inventory.Rate(prev, n)
			inventory.FairShare(prevTT, tt, n, sc.Places.V2, rs)
		}
		prev, prevTT, prevSc = n, tt, sc
	}
	return prev, nil
}
