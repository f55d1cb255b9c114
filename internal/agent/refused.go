package agent

import (
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/plan"
)

var descAdoptRefused = prometheus.NewDesc("cgwarden_adoption_refused",
	"Misplaced container cgroups the last adoption run refused to move because the container runtime did not confirm them (only their name claims the container: possibly a decoy; the agent's log names each).", nil, nil)

// refusals says out loud which misplaced cgroups adoption refuses because
// the runtime does not confirm them (plan.Skip.Refused): a warning the
// first time each is refused in a row of runs, and the number refused by
// the last run on /metrics. Only the last run's are kept, so a flood of
// decoys costs memory only while they exist.
type refusals struct {
	log  *slog.Logger
	mu   sync.Mutex
	last map[string]bool // cgroup + container, refused by the last run
}

// note takes the refusals of one adoption run's plan (nil: a run with
// nothing misplaced).
func (r *refusals) note(p *plan.Plan) {
	if r == nil {
		return
	}
	now := map[string]bool{}
	var fresh []plan.Skip
	if p != nil {
		for _, s := range p.Skipped {
			if !s.Refused {
				continue
			}
			k := s.Cgroup + "\x00" + s.Container
			if now[k] {
				continue
			}
			now[k] = true
			fresh = append(fresh, s)
		}
	}
	r.mu.Lock()
	last := r.last
	r.last = now
	r.mu.Unlock()
	for _, s := range fresh {
		if !last[s.Cgroup+"\x00"+s.Container] {
			r.log.Warn("not adopting a misplaced cgroup the runtime does not confirm", "pod", s.Pod, "container", s.Container,
				"cgroup", s.Cgroup, "reason", s.Reason)
		}
	}
}

// Describe implements prometheus.Collector.
func (r *refusals) Describe(ch chan<- *prometheus.Desc) { ch <- descAdoptRefused }

// Collect implements prometheus.Collector.
func (r *refusals) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	n := len(r.last)
	r.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descAdoptRefused, prometheus.GaugeValue, float64(n))
}

var _ prometheus.Collector = (*refusals)(nil)

// evidence is what the adopter confirms misplaced containers with: the
// host's /proc, and the runtime's container PIDs when the pods come from
// the CRI.
func evidence(host *cgroupfs.Host, lister metadata.Lister) *inventory.Evidence {
	ev := &inventory.Evidence{FS: host}
	if pids, ok := lister.(inventory.ContainerPIDs); ok {
		ev.Runtime = pids
	}
	return ev
}
