package hold

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/plan"
)

// Results of one adoption run (the result label of
// cgwarden_adoption_runs_total).
const (
	// AdoptAdopted: the run moved misplaced containers (journaled).
	AdoptAdopted = "adopted"
	// AdoptClean: nothing was misplaced.
	AdoptClean = "clean"
	// AdoptFailed: planning or applying failed (see the log).
	AdoptFailed = "failed"
)

// AdoptionMetrics count the adoption loop's runs and the processes they
// moved, for /metrics: a loop that keeps failing while pods stay
// misplaced is what the CgwardenAdoptionFailing alert looks for.
type AdoptionMetrics struct {
	runs  *prometheus.CounterVec
	moved prometheus.Counter
}

// NewAdoptionMetrics makes the series, every result present at 0.
func NewAdoptionMetrics() *AdoptionMetrics {
	m := &AdoptionMetrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgwarden_adoption_runs_total",
			Help: "Runs of serve --fix misplaced-container's adoption loop, by result: adopted (moved misplaced containers under their pods), clean (nothing misplaced), failed (see the log)."},
			[]string{"result"}),
		moved: prometheus.NewCounter(prometheus.CounterOpts{Name: "cgwarden_adoption_processes_moved_total",
			Help: "Processes the adoption loop moved from misplaced container cgroups to the cgroups under their pods."}),
	}
	for _, r := range []string{AdoptAdopted, AdoptClean, AdoptFailed} {
		m.runs.WithLabelValues(r)
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *AdoptionMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.runs.Describe(ch)
	m.moved.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *AdoptionMetrics) Collect(ch chan<- prometheus.Metric) {
	m.runs.Collect(ch)
	m.moved.Collect(ch)
}

var _ prometheus.Collector = (*AdoptionMetrics)(nil)

// Count counts one adoption run of result, which moved moved processes
// (m may be nil: nothing is counted).
func (m *AdoptionMetrics) Count(result string, moved int) {
	if m != nil {
		m.runs.WithLabelValues(result).Inc()
		m.moved.Add(float64(moved))
	}
}

// RunAdoption repairs misplaced containers every interval with fix's own
// plan and engine (each run journaled, `cgwarden revert` undoes it), until
// ctx ends; m (may be nil) counts the runs; onApply (may be nil) is told
// of each run that changed something. The engine is its own: the
// Holder's engine is not shared, as Engine.Meta changes with every round.
func RunAdoption(ctx context.Context, e *fix.Engine, sizes Sizes, every time.Duration, log *slog.Logger, m *AdoptionMetrics, onApply func(*fix.Result)) {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "adopt")
	defer e.Close()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		meta, err := sizes(ctx)
		if err != nil {
			log.Warn("pod metadata", "err", err)
		}
		e.Meta = meta
		res, err := e.Apply(fix.Options{Only: []string{plan.RuleMisplaced}})
		switch {
		case err != nil:
			m.Count(AdoptFailed, 0)
			log.Error("adopting misplaced containers", "err", err)
		case res.Run != "":
			moved := 0
			for _, s := range res.Steps {
				moved += len(s.Moved)
			}
			m.Count(AdoptAdopted, moved)
			log.Info("adopted misplaced containers", "run", res.Run, "operations", len(res.Steps), "processes", moved)
			if onApply != nil {
				onApply(res)
			}
		default:
			m.Count(AdoptClean, 0)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
