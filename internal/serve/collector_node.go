package serve

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The node and scan series on /metrics: what the scan being served saw of
// the node as a whole, and whether it is fresh.
var (
	ownNodeCPUs     = prometheus.NewDesc("cgwarden_node_cpus", "CPUs online on the node.", nil, nil)
	ownNodeCgroups  = prometheus.NewDesc("cgwarden_node_cgroup_info", "The node's cgroups, always 1: cgroup_version (v1, hybrid: v1 controllers beside an empty cgroup2, v2) and cgroup_driver, the kubelet's (cgroupfs, systemd; empty when no kubepods hierarchy was found), and the container_runtime its Node reports (status.nodeInfo.containerRuntimeVersion; empty when the agent does not read its Node). A fleet in the middle of its v1 to v2 migration shows both.", []string{"cgroup_version", "cgroup_driver", "container_runtime"}, nil)
	ownPods         = prometheus.NewDesc("cgwarden_pods", "Pods found in the last scan.", nil, nil)
	ownReadErrors   = prometheus.NewDesc("cgwarden_scan_read_errors", "Files the last scan could not read or parse; the figures they feed are unknown and left out.", nil, nil)
	ownLastScan     = prometheus.NewDesc("cgwarden_last_scan_timestamp_seconds", "Time of the scan being served, in seconds since the epoch.", nil, nil)
	ownFindings     = prometheus.NewDesc("cgwarden_audit_findings", "Audit findings in the last scan, by rule and severity.", []string{"rule", "severity"}, nil)
	ownLastScanFail = prometheus.NewDesc("cgwarden_last_scan_failed", "1 if the latest scan attempt failed and an older scan is being served, else 0.", nil, nil)
)

// nodeCollector reads the node's figures from the state being served at
// each scrape.
type nodeCollector struct{ s *Server }

var _ prometheus.Collector = nodeCollector{}

func (nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{ownNodeCPUs, ownNodeCgroups, ownPods, ownReadErrors, ownLastScan, ownFindings, ownLastScanFail} {
		ch <- d
	}
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.cur.Load()
	if st == nil {
		return
	}
	ch <- constMetric(ownLastScanFail, prometheus.GaugeValue, b2f(st.failed))
	ch <- constMetric(ownNodeCPUs, prometheus.GaugeValue, float64(st.node.CPUs))
	ch <- constMetric(ownNodeCgroups, prometheus.GaugeValue, 1, string(st.node.Version), string(st.node.Driver), st.meta.NodeInfo().ContainerRuntimeVersion)
	ch <- constMetric(ownPods, prometheus.GaugeValue, float64(len(st.pods)))
	ch <- constMetric(ownReadErrors, prometheus.GaugeValue, float64(len(st.node.Errors)))
	ch <- constMetric(ownLastScan, prometheus.GaugeValue, float64(st.time.UnixNano())/1e9)
	for _, f := range st.findings {
		ch <- constMetric(ownFindings, prometheus.GaugeValue, float64(f.Count), f.Rule, f.Severity)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// loopMetrics count the scan loop's work; the Server updates them as it
// scans, and registers each of them.
type loopMetrics struct {
	scans, failures, metaFailures prometheus.Counter
	duration                      prometheus.Histogram
}

func newLoopMetrics() *loopMetrics {
	return &loopMetrics{
		scans: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cgwarden_scans_total", Help: "Scans of the node's cgroups completed, failed ones included.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cgwarden_scan_failures_total", Help: "Scans that failed as a whole (the cgroup tree could not be listed); the previous scan keeps being served.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cgwarden_scan_duration_seconds", Help: "Time one scan of the node's cgroups took.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		metaFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cgwarden_metadata_failures_total", Help: "Times the pod metadata source failed; pods keep the names last known, or their UIDs.",
		}),
	}
}
