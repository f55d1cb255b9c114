package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/failpoint"
	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/serve"
)

// Picture is one scan of the node as every consumer sees it; immutable
// once published.
type Picture struct {
	// Seq counts the loop's scans from 1.
	Seq  uint64
	Node *inventory.Node
	// Meta named the scan's pods, with the sizes the holder enforces.
	Meta *metadata.Set
	// Report is the scan's audit, made once for /metrics, /audit and
	// Events.
	Report *audit.Report
}

// Sink is told of each picture the loop publishes (serve, Events, the
// adopter). It runs on the loop's goroutine: it must not block.
type Sink func(*Picture)

// Loop is the node loop: see the package comment.
type Loop struct {
	sc   *inventory.Scanner
	meta hold.Sizes
	// policy is the audit's: the agent's tier cap, the holder's too.
	policy   audit.Policy
	srv      *serve.Server
	interval time.Duration
	// clock schedules the scans and times them (the wall clock; tests
	// give it and the Server one fake clock).
	clock clock.Clock
	log   *slog.Logger
	sinks []Sink
	kick  chan struct{}

	// Owned by Run's goroutine.
	sampling inventory.Sampling
	lastMeta *metadata.Set

	mu      sync.Mutex
	started uint64 // the Seq of the scan under way or last begun
	latest  *Picture
	lastErr error
	done    uint64 // the Seq of the last scan finished, failed or not
	changed chan struct{}
}

// NewLoop makes the loop of scanner sc (its Steady, if any, already set
// up on the loop's Hub), named with meta, serving to srv (may be nil).
func NewLoop(sc *inventory.Scanner, meta hold.Sizes, policy audit.Policy, srv *serve.Server, interval time.Duration, demand bool, log *slog.Logger) *Loop {
	l := &Loop{sc: sc, meta: meta, policy: policy, srv: srv, interval: interval, clock: clock.RealClock{}, log: log.With("component", "loop"),
		kick: make(chan struct{}, 1), changed: make(chan struct{})}
	l.sampling.Demand = demand
	l.sampling.Clock = func() time.Time { return l.clock.Now() }
	return l
}

// Subscribe adds a sink; call before Run.
func (l *Loop) Subscribe(s Sink) { l.sinks = append(l.sinks, s) }

// Places are the hierarchies the loop's scans read.
func (l *Loop) Places() mounts.Places { return l.sc.Places }

// Latest is the last picture published (nil before the first scan).
func (l *Loop) Latest() *Picture {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.latest
}

// Run scans every interval, and at once when kicked, until ctx ends.
// Scans start on a fixed schedule; one that overruns makes the next start
// at once. The server's /healthz and /readyz follow the loop
// (serve.Server.Looping).
func (l *Loop) Run(ctx context.Context) {
	next := l.clock.Now()
	if l.srv != nil {
		l.srv.Looping()
	}
	for {
		l.scanOnce(ctx)
		if l.srv != nil {
			l.srv.Looping()
		}
		next = next.Add(l.interval)
		now := l.clock.Now()
		if !next.After(now) {
			// The scan overran: the next starts at once, not the missed
			// ones one after the other (it serves a kick waiting too).
			next = now
			select {
			case <-ctx.Done():
				return
			case <-l.kick:
			default:
			}
			continue
		}
		t := l.clock.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-l.kick:
			t.Stop()
			// A kicked scan starts the schedule again: the next tick is
			// one interval after it. Adding an interval per scan to the
			// old schedule instead ran it ahead by an interval at every
			// kick, and a holder asking for fresh scans after a
			// predecessor's weights (its Fresh kicks) pushed the next
			// tick minutes away: /readyz went stale ("the last good scan
			// is N s old") with the loop idle.
			next = l.clock.Now()
		}
	}
}

// scanOnce reads the metadata, scans, audits and publishes.
func (l *Loop) scanOnce(ctx context.Context) {
	// A scan stuck in the kernel or a deadlock, for the lane's test that
	// the kubelet restarts the agent (/healthz fails after 3 intervals).
	failpoint.Hit("loop/scan")
	l.mu.Lock()
	l.started++
	seq := l.started
	l.mu.Unlock()
	meta, err := l.meta(ctx)
	if l.srv != nil {
		l.srv.MetaFailed(err, len(meta.Pods()))
	}
	if err == nil {
		l.lastMeta = meta
	}
	meta = l.lastMeta
	l.sampling.Meta = meta
	start := l.clock.Now()
	n, err := l.sampling.Take(l.sc, start)
	took := l.clock.Since(start)
	var pic *Picture
	if err == nil {
		pic = &Picture{Seq: seq, Node: n, Meta: meta, Report: audit.Run(&audit.Input{Node: n, Meta: meta, Policy: l.policy})}
	} else {
		l.log.Error("scan failed; serving the previous scan", "err", err)
	}
	if l.srv != nil {
		var smp serve.Scan
		if pic != nil {
			smp = serve.Scan{Node: pic.Node, Meta: pic.Meta, Report: pic.Report}
		}
		l.srv.Scanned(smp, took, err)
	}
	if pic != nil {
		for _, s := range l.sinks {
			s(pic)
		}
	}
	l.mu.Lock()
	if pic != nil {
		l.latest = pic
	}
	l.lastErr, l.done = err, seq
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// Fresh asks for a scan begun after the call (a kick) and returns it:
// what the weight holder plans from when cgroups came or went.
func (l *Loop) Fresh(ctx context.Context) (*inventory.Node, *metadata.Set, error) {
	l.mu.Lock()
	want := l.started + 1
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	for {
		l.mu.Lock()
		done, pic, err, changed := l.done, l.latest, l.lastErr, l.changed
		l.mu.Unlock()
		if done >= want {
			if err != nil {
				return nil, nil, err
			}
			if pic == nil || pic.Seq < want {
				return nil, nil, errors.New("no scan")
			}
			return pic.Node, pic.Meta, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-changed:
		}
	}
}

var _ hold.Loop = (*Loop)(nil)

// applier is the one goroutine that makes the agent's writes.
type applier struct{ jobs chan func() }

func newApplier() *applier { return &applier{jobs: make(chan func())} }

// run makes writes until ctx ends; stop it only after every caller of Do
// has stopped.
func (a *applier) run(ctx context.Context) {
	for {
		select {
		case f := <-a.jobs:
			f()
		case <-ctx.Done():
			return
		}
	}
}

// Do runs f on the applier and waits for it.
func (a *applier) Do(f func()) {
	done := make(chan struct{})
	a.jobs <- func() { defer close(done); f() }
	<-done
}

// hostUsage is what the agent's metrics count on the host.
type hostUsage interface{ Usage() cgroupfs.Usage }
