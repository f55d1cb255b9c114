package inventory

import (
	"log/slog"
	"time"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// Sampling turns samples of one node, taken in order, into its picture.
// It is the one loop from samples to a node: live CLI scans, demand
// sampling, snapshot capture and replay, serve and the tests all go
// through Take, so the cgroup tree, /proc/meminfo (read by Scan), CPU
// rates and the demand-aware fair share are computed the same way on every
// path. The zero value scans without demand and without metadata.
type Sampling struct {
	// Meta names pods and containers; may be nil.
	Meta *metadata.Set
	// Demand reads the threads' run and wait times with every sample and,
	// from the second sample on, fills DemandCores and FairCores (see
	// FairShare).
	Demand bool
	// Clock stamps the thread readings of a live host (when the threads
	// were read, not when the scan began); nil stamps them with the
	// sample's time, as a snapshot recorded it.
	Clock func() time.Time

	prev   *Node
	prevTT *ThreadTimes
	prevSc *Scanner
	rs     RunnableSamples
}

// Take scans one sample with sc at now and returns its picture, with CPU
// rates (and, with Demand, the fair share) from the sample before.
func (s *Sampling) Take(sc *Scanner, now time.Time) (*Node, error) {
	sc.Meta = s.Meta
	n, err := sc.Scan(now)
	if err != nil {
		return nil, err
	}
	var tt *ThreadTimes
	if s.Demand {
		at := now
		if s.Clock != nil {
			at = s.Clock()
		}
		var errs []error
		tt, errs = sc.ReadThreadTimes(n, at)
		for _, e := range errs {
			slog.Debug("thread times", "err", e)
		}
	}
	if s.prev != nil {
		Rate(s.prev, n)
		if s.Demand {
			FairShare(s.prevTT, tt, n, sc.Places.V2, &s.rs)
		}
	}
	// The state looks counted so far belong to the interval that ended.
	s.prev, s.prevTT, s.prevSc, s.rs = n, tt, sc, RunnableSamples{}
	return n, nil
}

// LookRunnable looks once at the state of the threads read with the last
// sample (see RunnableSamples); a live caller does it several times while
// it waits for the next sample. Without Demand, or before the first
// sample, it does nothing.
func (s *Sampling) LookRunnable() {
	if s.prevSc != nil && s.prevTT != nil {
		s.prevSc.SampleRunnable(s.prevTT, &s.rs)
	}
}

// TakeAll scans samples that each carry their own tree (a snapshot's) in
// order and returns the last picture. An error opening or scanning a
// sample is returned as is; callers say where the samples came from.
func (s *Sampling) TakeAll(samples []cgroupfs.Sample) (*Node, error) {
	var n *Node
	for _, smp := range samples {
		sc, err := Open(smp.FS)
		if err != nil {
			return nil, err
		}
		if n, err = s.Take(sc, smp.Time); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// Live takes two samples of a live host with sc, interval apart (one when
// interval is 0), and returns the second's picture. wait sleeps the i-th
// of n equal parts of the interval; with Demand the threads' states are
// looked at after each of looks parts (see RunnableSamples), without it
// the interval is one part. Thread readings are stamped with the time
// they were read.
func (s *Sampling) Live(sc *Scanner, interval time.Duration, looks int, wait func(i, n int)) (*Node, error) {
	if interval <= 0 {
		one := *s
		one.Demand = false // one sample has no fair share: read no threads
		return one.Take(sc, time.Now())
	}
	if s.Clock == nil {
		s.Clock = time.Now
	}
	if _, err := s.Take(sc, time.Now()); err != nil {
		return nil, err
	}
	if !s.Demand || looks < 1 {
		looks = 1
	}
	for i := 0; i < looks; i++ {
		wait(i, looks)
		if s.Demand {
			s.LookRunnable()
		}
	}
	return s.Take(sc, time.Now())
}
