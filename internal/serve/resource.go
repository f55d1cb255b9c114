package serve

import (
	"bytes"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/cgwarden/cgwarden/internal/aggregate"
)

// The kubelet's resource metrics (pkg/kubelet/metrics/collectors/
// resource_metrics.go): same names, types, label names and HELP texts. The
// kubelet's metrics framework prefixes HELP with the stability level.
var (
	nodeCPUDesc = prometheus.NewDesc("node_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	nodeMemDesc = prometheus.NewDesc("node_memory_working_set_bytes",
		"[STABLE] Current working set of the node in bytes", nil, nil)
	containerCPUDesc = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the container in core-seconds", []string{"container", "pod", "namespace"}, nil)
	containerMemDesc = prometheus.NewDesc("container_memory_working_set_bytes",
		"[STABLE] Current working set of the container in bytes", []string{"container", "pod", "namespace"}, nil)
	containerStartDesc = prometheus.NewDesc("container_start_time_seconds",
		"[STABLE] Start time of the container since unix epoch in seconds", []string{"container", "pod", "namespace"}, nil)
	podCPUDesc = prometheus.NewDesc("pod_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the pod in core-seconds", []string{"pod", "namespace"}, nil)
	podMemDesc = prometheus.NewDesc("pod_memory_working_set_bytes",
		"[STABLE] Current working set of the pod in bytes", []string{"pod", "namespace"}, nil)
	scrapeErrorDesc = prometheus.NewDesc("resource_scrape_error",
		"[STABLE] 1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

// The kubelet serves the Prometheus text format 0.0.4; metrics-server parses
// exactly that.
var resourceFormat = expfmt.NewFormat(expfmt.TypeTextPlain)

const resourceContentType = "text/plain; version=0.0.4; charset=utf-8"

// resourceCollector emits one state's resource metrics. As in the kubelet,
// CPU and working-set samples carry the scan's time; the start time and
// the error flag do not.
type resourceCollector struct {
	st  *state
	log *slog.Logger
}

func (c *resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeCPUDesc, nodeMemDesc, containerCPUDesc, containerMemDesc, containerStartDesc, podCPUDesc, podMemDesc, scrapeErrorDesc} {
		ch <- d
	}
}

func (c *resourceCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.st
	at := st.time
	stamp := func(m prometheus.Metric) prometheus.Metric { return prometheus.NewMetricWithTimestamp(at, m) }
	failed := 0.0
	if st.failed {
		failed = 1
	}
	ch <- constMetric(scrapeErrorDesc, prometheus.GaugeValue, failed)
	if v := st.nodeUsage.CPUUsageNs; v != nil {
		ch <- stamp(constMetric(nodeCPUDesc, prometheus.CounterValue, seconds(*v)))
	}
	if v := st.nodeUsage.WorkingSetBytes; v != nil {
		ch <- stamp(constMetric(nodeMemDesc, prometheus.GaugeValue, float64(*v)))
	}
	// Two series with one label set would make the whole exposition
	// invalid; a pod recreated under the same name while its old cgroup
	// lingers, or a restarted container whose old cgroup is not yet gone,
	// can produce them. The first (in scan order) is kept.
	seenPods := map[[2]string]bool{}
	seenContainers := map[[3]string]bool{}
	for i := range st.pods {
		p := &st.pods[i]
		pod, ns := podName(p), p.Namespace
		for j := range p.Containers {
			ct := &p.Containers[j]
			name := containerName(ct)
			key := [3]string{name, pod, ns}
			if seenContainers[key] {
				c.log.Debug("duplicate container series left out", "pod", ns+"/"+pod, "container", name, "cgroup", ct.Cgroup.Path)
				continue
			}
			seenContainers[key] = true
			if t := st.containerStart(p, ct); !t.IsZero() {
				ch <- constMetric(containerStartDesc, prometheus.GaugeValue, float64(t.UnixNano())/1e9, name, pod, ns)
			}
			if v := ct.Usage.CPUUsageNs; v != nil {
				ch <- stamp(constMetric(containerCPUDesc, prometheus.CounterValue, seconds(*v), name, pod, ns))
			}
			if v := ct.Usage.WorkingSetBytes; v != nil {
				ch <- stamp(constMetric(containerMemDesc, prometheus.GaugeValue, float64(*v), name, pod, ns))
			}
		}
		key := [2]string{pod, ns}
		if seenPods[key] {
			c.log.Debug("duplicate pod series left out", "pod", ns+"/"+pod, "uid", p.UID)
			continue
		}
		seenPods[key] = true
		if v := p.Usage.CPUUsageNs; v != nil {
			ch <- stamp(constMetric(podCPUDesc, prometheus.CounterValue, seconds(*v), pod, ns))
		}
		if v := p.Usage.WorkingSetBytes; v != nil {
			ch <- stamp(constMetric(podMemDesc, prometheus.GaugeValue, float64(*v), pod, ns))
		}
	}
}

func seconds(ns uint64) float64 { return float64(ns) / 1e9 }

// constMetric is prometheus.MustNewConstMetric with label values made
// valid UTF-8 first: names come from cgroup directories and metadata, and
// one odd byte must not take the exposition (or the process) down. The
// descriptors and label counts are fixed here, so nothing else can fail.
func constMetric(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	for i, l := range labels {
		if !utf8.ValidString(l) {
			labels[i] = strings.ToValidUTF8(l, "\uFFFD")
		}
	}
	return prometheus.MustNewConstMetric(d, t, v, labels...)
}

// containerStart is the container's start time from the metadata the
// scan used, else zero (unknown: the kubelet then leaves the series out
// too).
func (st *state) containerStart(p *aggregate.Pod, c *aggregate.Container) time.Time {
	mp, ok := st.meta.Pod(p.UID)
	if !ok || c.ID == "" {
		return time.Time{}
	}
	for _, mc := range mp.Containers {
		if mc.ID == c.ID {
			return mc.StartTime
		}
	}
	return time.Time{}
}

// podStart is the pod's start time from metadata, else zero.
func (st *state) podStart(p *aggregate.Pod) time.Time {
	if mp, ok := st.meta.Pod(p.UID); ok {
		return mp.StartTime
	}
	return time.Time{}
}

func (st *state) renderResource() ([]byte, error) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(&resourceCollector{st: st, log: st.log}); err != nil {
		return nil, err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, resourceFormat)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}
