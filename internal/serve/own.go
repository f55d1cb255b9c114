package serve

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgwarden/cgwarden/internal/aggregate"
	"github.com/cgwarden/cgwarden/internal/inventory"
)

// cgwarden's own per-pod and per-container metrics on /metrics. Pod
// figures are the corrected ones (package aggregate); the pod cgroup's own
// figure, which is what the kubelet reports, is beside them so the gap can
// be graphed and alerted on.
var (
	podLabels       = []string{"namespace", "pod", "uid"}
	containerLabels = []string{"namespace", "pod", "uid", "container", "container_id"}

	ownPodCPU       = prometheus.NewDesc("cgwarden_pod_cpu_usage_seconds_total", "CPU time used by the pod's processes wherever their cgroups live (misplaced containers included), in core-seconds.", podLabels, nil)
	ownPodCgroupCPU = prometheus.NewDesc("cgwarden_pod_cgroup_cpu_usage_seconds_total", "CPU time accounted to the pod cgroup itself, what the kubelet reports for the pod, in core-seconds.", podLabels, nil)
	ownPodCores     = prometheus.NewDesc("cgwarden_pod_cpu_usage_cores", "CPU the pod used between the last two scans, in cores.", podLabels, nil)
	ownPodWS        = prometheus.NewDesc("cgwarden_pod_memory_working_set_bytes", "Working set of the pod's processes wherever their cgroups live (usage minus inactive file pages), in bytes.", podLabels, nil)
	ownPodRSS       = prometheus.NewDesc("cgwarden_pod_memory_rss_bytes", "Anonymous memory of the pod's processes wherever their cgroups live, in bytes.", podLabels, nil)
	ownPodWeight    = prometheus.NewDesc("cgwarden_pod_cpu_weight", "Raw CPU weight of the pod cgroup (cgroup v1 cpu.shares or v2 cpu.weight).", podLabels, nil)
	ownPodGuar      = prometheus.NewDesc("cgwarden_pod_cpu_guaranteed_cores", "CPU the pod cgroup is guaranteed when every cgroup on the node is busy, in cores.", podLabels, nil)
	ownPodFair      = prometheus.NewDesc("cgwarden_pod_cpu_fair_cores", "Demand-aware fair share of CPU of the pod cgroup, in cores.", podLabels, nil)
	ownPodMisplaced = prometheus.NewDesc("cgwarden_pod_misplaced", "1 if at least one of the pod's container or sandbox cgroups lives outside the pod cgroup, else 0.", podLabels, nil)

	ownCtrCPU       = prometheus.NewDesc("cgwarden_container_cpu_usage_seconds_total", "CPU time used by the container's cgroup, in core-seconds.", containerLabels, nil)
	ownCtrCores     = prometheus.NewDesc("cgwarden_container_cpu_usage_cores", "CPU the container used between the last two scans, in cores.", containerLabels, nil)
	ownCtrWS        = prometheus.NewDesc("cgwarden_container_memory_working_set_bytes", "Working set of the container's cgroup, in bytes.", containerLabels, nil)
	ownCtrWeight    = prometheus.NewDesc("cgwarden_container_cpu_weight", "Raw CPU weight of the container cgroup (cgroup v1 cpu.shares or v2 cpu.weight).", containerLabels, nil)
	ownCtrGuar      = prometheus.NewDesc("cgwarden_container_cpu_guaranteed_cores", "CPU the container cgroup is guaranteed when every cgroup on the node is busy, in cores.", containerLabels, nil)
	ownCtrFair      = prometheus.NewDesc("cgwarden_container_cpu_fair_cores", "Demand-aware fair share of CPU of the container cgroup, in cores.", containerLabels, nil)
	ownCtrMisplaced = prometheus.NewDesc("cgwarden_container_misplaced", "1 if the container's cgroup lives outside its pod's cgroup, else 0; cgroup is where it lives.", append(containerLabels[:len(containerLabels):len(containerLabels)], "cgroup"), nil)

	ownNodeCPUs     = prometheus.NewDesc("cgwarden_node_cpus", "CPUs online on the node.", nil, nil)
	ownPods         = prometheus.NewDesc("cgwarden_pods", "Pods found in the last scan.", nil, nil)
	ownReadErrors   = prometheus.NewDesc("cgwarden_scan_read_errors", "Files the last scan could not read or parse; the figures they feed are unknown and left out.", nil, nil)
	ownLastScan     = prometheus.NewDesc("cgwarden_last_scan_timestamp_seconds", "Time of the scan being served, in seconds since the epoch.", nil, nil)
	ownFindings     = prometheus.NewDesc("cgwarden_audit_findings", "Audit findings in the last scan, by rule and severity.", []string{"rule", "severity"}, nil)
	ownLastScanFail = prometheus.NewDesc("cgwarden_last_scan_failed", "1 if the latest scan attempt failed and an older scan is being served, else 0.", nil, nil)
)

// ownCollector reads the current state at each scrape of /metrics.
type ownCollector struct{ s *Server }

func (c *ownCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{ownPodCPU, ownPodCgroupCPU, ownPodCores, ownPodWS, ownPodRSS, ownPodWeight, ownPodGuar, ownPodFair, ownPodMisplaced,
		ownCtrCPU, ownCtrCores, ownCtrWS, ownCtrWeight, ownCtrGuar, ownCtrFair, ownCtrMisplaced,
		ownNodeCPUs, ownPods, ownReadErrors, ownLastScan, ownFindings, ownLastScanFail} {
		ch <- d
	}
}

func (c *ownCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.cur.Load()
	if st == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- constMetric(d, prometheus.GaugeValue, v, labels...)
	}
	failed := 0.0
	if st.failed {
		failed = 1
	}
	gauge(ownLastScanFail, failed)
	gauge(ownNodeCPUs, float64(st.node.CPUs))
	gauge(ownPods, float64(len(st.pods)))
	gauge(ownReadErrors, float64(len(st.node.Errors)))
	gauge(ownLastScan, float64(st.time.UnixNano())/1e9)
	for _, f := range st.findings {
		gauge(ownFindings, float64(f.Count), f.Rule, f.Severity)
	}
	// Pods and containers are keyed by UID and container ID, which are
	// unique, so no two series collide here.
	seen := map[string]bool{}
	for i := range st.pods {
		p := &st.pods[i]
		if seen[p.UID] {
			continue
		}
		seen[p.UID] = true
		pl := []string{p.Namespace, podName(p), p.UID}
		usage(ch, ownPodCPU, ownPodCores, ownPodWS, p.Usage, pl)
		if v := p.Usage.RSSBytes; v != nil {
			gauge(ownPodRSS, float64(*v), pl...)
		}
		if p.Cgroup != nil {
			if v := p.Cgroup.Stats.CPU.UsageNs; v != nil {
				ch <- constMetric(ownPodCgroupCPU, prometheus.CounterValue, seconds(*v), pl...)
			}
			cgroupCPU(ch, ownPodWeight, ownPodGuar, ownPodFair, p.Cgroup, pl)
		}
		gauge(ownPodMisplaced, b2f(p.Outside), pl...)
		for j := range p.Containers {
			ct := &p.Containers[j]
			key := p.UID + "/" + containerName(ct) + "/" + ct.ID
			if seen[key] {
				continue
			}
			seen[key] = true
			cl := append(pl[:len(pl):len(pl)], containerName(ct), ct.ID)
			usage(ch, ownCtrCPU, ownCtrCores, ownCtrWS, ct.Usage, cl)
			cgroupCPU(ch, ownCtrWeight, ownCtrGuar, ownCtrFair, ct.Cgroup, cl)
			outside := p.Cgroup == nil || !ct.Cgroup.Within(p.Cgroup)
			gauge(ownCtrMisplaced, b2f(outside), append(cl[:len(cl):len(cl)], ct.Cgroup.Path)...)
		}
	}
}

func usage(ch chan<- prometheus.Metric, cpu, cores, ws *prometheus.Desc, u aggregate.Usage, labels []string) {
	if v := u.CPUUsageNs; v != nil {
		ch <- constMetric(cpu, prometheus.CounterValue, seconds(*v), labels...)
	}
	if v := u.CPUCores; v != nil {
		ch <- constMetric(cores, prometheus.GaugeValue, *v, labels...)
	}
	if v := u.WorkingSetBytes; v != nil {
		ch <- constMetric(ws, prometheus.GaugeValue, float64(*v), labels...)
	}
}

func cgroupCPU(ch chan<- prometheus.Metric, weight, guar, fair *prometheus.Desc, c *inventory.Cgroup, labels []string) {
	if v := c.Stats.CPU.Weight; v != nil {
		ch <- constMetric(weight, prometheus.GaugeValue, float64(*v), labels...)
	}
	ch <- constMetric(guar, prometheus.GaugeValue, c.GuaranteedCores, labels...)
	if v := c.FairCores; v != nil {
		ch <- constMetric(fair, prometheus.GaugeValue, *v, labels...)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
