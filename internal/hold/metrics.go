package hold

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// What the Holder exposes on /metrics: per held cgroup its target, the
// overwrites it undid, the time they stood, and the weight the cgroup
// actually had on average since the Holder took it on.
var (
	heldLabels   = []string{"cgroup", "role", "uid"} // uid: the pod's UID, empty for the tier
	descTarget   = prometheus.NewDesc("cgwarden_weight_target", "CPU weight cgwarden holds the cgroup at (cgroup v1 cpu.shares or v2 cpu.weight): what the kubelet would write if the sized pods requested their sizes.", heldLabels, nil)
	descResets   = prometheus.NewDesc("cgwarden_weight_resets_total", "Times the cgroup's weight was overwritten by someone else (the kubelet resets the BestEffort tier) and cgwarden wrote the target back.", heldLabels, nil)
	descOff      = prometheus.NewDesc("cgwarden_weight_off_target_seconds_total", "Seconds between noticing an overwrite of the cgroup's weight and restoring the target, summed.", heldLabels, nil)
	descEff      = prometheus.NewDesc("cgwarden_weight_effective", "Time-weighted average of the weight the cgroup held since cgwarden started holding it.", heldLabels, nil)
	descWatches  = prometheus.NewDesc("cgwarden_weight_watches", "inotify watches the weight holder keeps (target files, tiers and sized pods).", nil, nil)
	descReplans  = prometheus.NewDesc("cgwarden_weight_replans_total", "Times the weight holder planned the node's weights (at start, on cgroups made or removed, on size changes, and every resync).", nil, nil)
	descFresh    = prometheus.NewDesc("cgwarden_weight_fresh_scans_total", "Scans the weight holder asked the node loop for at once, beyond the scans the loop makes every interval (each plans from: at start, and when cgroups came or went or a size changed); with the CRI each is one more listing of the runtime.", nil, nil)
	descHoldErrs = prometheus.NewDesc("cgwarden_weight_errors_total", "Plans or writes of the weight holder that failed (see the log).", nil, nil)
)

// Describe implements prometheus.Collector.
func (h *Holder) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTarget, descResets, descOff, descEff, descWatches, descReplans, descFresh, descHoldErrs} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Targets dropped since the last
// scrape (their pod went) are reported once more, so their last counts
// are not lost.
func (h *Holder) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	emit := func(f *held, live bool) {
		l := []string{f.t.Cgroup, string(f.t.Role), f.t.Pod}
		if live {
			ch <- prometheus.MustNewConstMetric(descTarget, prometheus.GaugeValue, float64(f.t.Value), l...)
			ch <- prometheus.MustNewConstMetric(descEff, prometheus.GaugeValue, f.effective(now), l...)
		}
		ch <- prometheus.MustNewConstMetric(descResets, prometheus.CounterValue, float64(f.resets), l...)
		ch <- prometheus.MustNewConstMetric(descOff, prometheus.CounterValue, f.off.Seconds(), l...)
	}
	for _, f := range h.files {
		emit(f, true)
	}
	for p, f := range h.gone {
		if _, back := h.files[p]; !back {
			emit(f, false)
		}
		delete(h.gone, p)
	}
	ch <- prometheus.MustNewConstMetric(descWatches, prometheus.GaugeValue, float64(h.w.Len()))
	ch <- prometheus.MustNewConstMetric(descReplans, prometheus.CounterValue, float64(h.replans))
	ch <- prometheus.MustNewConstMetric(descFresh, prometheus.CounterValue, float64(h.fresh))
	ch <- prometheus.MustNewConstMetric(descHoldErrs, prometheus.CounterValue, float64(h.errs))
}

var _ prometheus.Collector = (*Holder)(nil)
