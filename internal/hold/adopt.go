package hold

import (
	"github.com/prometheus/client_golang/prometheus"
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

// Collectors are m's series, to register.
func (m *AdoptionMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.runs, m.moved}
}

// Count counts one adoption run of result, which moved moved processes
// (m may be nil: nothing is counted).
func (m *AdoptionMetrics) Count(result string, moved int) {
	if m != nil {
		m.runs.WithLabelValues(result).Inc()
		m.moved.Add(float64(moved))
	}
}
