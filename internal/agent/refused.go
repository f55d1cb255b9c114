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

// gauge serves the number of cgroups the last run refused.
func (r *refusals) gauge() prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cgwarden_adoption_refused",
		Help: "Misplaced container cgroups the last adoption run refused to move because the container runtime did not confirm them (only their name claims the container: possibly a decoy; the agent's log names each)."},
		func() float64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			return float64(len(r.last))
		})
}

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
