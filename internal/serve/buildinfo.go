package serve

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgwarden/cgwarden/internal/buildinfo"
)

// buildInfoDesc follows the Prometheus convention for build information
// (prometheus_build_info, node_exporter_build_info): a gauge of 1 whose
// labels name the build, so dashboards can join on it.
var buildInfoDesc = prometheus.NewDesc("cgwarden_build_info",
	"A metric with a constant '1' value labeled by the version, VCS commit and Go version cgwarden was built from.",
	[]string{"version", "revision", "goversion"}, nil)

// buildInfoCollector exports cgwarden_build_info.
type buildInfoCollector struct{ in buildinfo.Info }

var _ prometheus.Collector = buildInfoCollector{}

func (c buildInfoCollector) Describe(ch chan<- *prometheus.Desc) { ch <- buildInfoDesc }

func (c buildInfoCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(buildInfoDesc, prometheus.GaugeValue, 1, c.in.Version, c.in.Commit(), c.in.GoVersion)
}
