package nriplugin

import "github.com/prometheus/client_golang/prometheus"

// Results of a listed handler's container (the result label).
const (
	// ResultPlaced: cgroupsPath changed to the kubelet's layout's.
	ResultPlaced = "placed"
	// ResultAlreadyRight: set, to the path the runtime had proposed (a
	// cgroupfs node, where containerd already gives the layout's path).
	ResultAlreadyRight = "already_right"
	// ResultWouldPlace: --dry-run; nothing set.
	ResultWouldPlace = "would_place"
	// ResultFailed: not placed (see the failures counter); let through.
	ResultFailed = "failed"
)

// Metrics are the plugin's own series, served on /metrics.
type Metrics struct {
	// Requests counts every CreateContainer the runtime sent.
	Requests prometheus.Counter
	// Containers counts listed handlers' containers by handler and result.
	Containers *prometheus.CounterVec
	// Failures counts what let a container through unplaced, by reason.
	Failures *prometheus.CounterVec
	// Connected is 1 while the plugin is registered with the runtime.
	Connected prometheus.Gauge
}

// NewMetrics makes the series and registers them with reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounter(prometheus.CounterOpts{Name: "cgwarden_nri_create_container_requests_total",
			Help: "CreateContainer requests the runtime sent cgwarden's NRI plugin."}),
		Containers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgwarden_nri_containers_total",
			Help: "Containers of listed runtime handlers, by what the plugin did: placed (cgroupsPath changed), already_right (set to the path the runtime proposed), would_place (--dry-run), failed (let through unplaced)."},
			[]string{"handler", "result"}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgwarden_nri_failures_total",
			Help: "Containers let through unplaced, or learned-file reads that failed, by reason."},
			[]string{"reason"}),
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cgwarden_nri_connected",
			Help: "1 while the plugin is registered with the runtime's NRI socket."}),
	}
	// Every reason from the start at 0: a rate of failures is then 0, not
	// no data, and increase() sees the first failure.
	for _, r := range []string{FailPlace, FailPanic, FailLearned} {
		m.Failures.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Containers, m.Failures, m.Connected)
	}
	return m
}

// Failure reasons (the reason label).
const (
	FailPlace   = "cannot_place" // no cgroup parent, an unknown shape, a bad container ID
	FailPanic   = "panic"
	FailLearned = "learned_file"
)
