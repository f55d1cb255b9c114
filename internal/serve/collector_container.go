package serve

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgwarden/cgwarden/internal/aggregate"
)

// cgwarden's own per-container series on /metrics: each container's own
// cgroup, wherever it lives.
var (
	containerLabels = []string{"namespace", "pod", "uid", "container", "container_id"}

	ownCtrCPU       = prometheus.NewDesc("cgwarden_container_cpu_usage_seconds_total", "CPU time used by the container's cgroup, in core-seconds.", containerLabels, nil)
	ownCtrCores     = prometheus.NewDesc("cgwarden_container_cpu_usage_cores", "CPU the container used between the last two scans, in cores.", containerLabels, nil)
	ownCtrWS        = prometheus.NewDesc("cgwarden_container_memory_working_set_bytes", "Working set of the container's cgroup, in bytes.", containerLabels, nil)
	ownCtrWeight    = prometheus.NewDesc("cgwarden_container_cpu_weight", "Raw CPU weight of the container cgroup (cgroup v1 cpu.shares or v2 cpu.weight).", containerLabels, nil)
	ownCtrGuar      = prometheus.NewDesc("cgwarden_container_cpu_guaranteed_cores", "CPU the container cgroup is guaranteed when every cgroup on the node is busy, in cores.", containerLabels, nil)
	ownCtrFair      = prometheus.NewDesc("cgwarden_container_cpu_fair_cores", "Demand-aware fair share of CPU of the container cgroup, in cores.", containerLabels, nil)
	ownCtrMisplaced = prometheus.NewDesc("cgwarden_container_misplaced", "1 if the container's cgroup lives outside its pod's cgroup, else 0; cgroup is where it lives.", append(containerLabels[:len(containerLabels):len(containerLabels)], "cgroup"), nil)
)

// containerCollector reads the containers of the state being served at
// each scrape.
type containerCollector struct{ s *Server }

var _ prometheus.Collector = containerCollector{}

func (c containerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{ownCtrCPU, ownCtrCores, ownCtrWS, ownCtrWeight, ownCtrGuar, ownCtrMisplaced} {
		ch <- d
	}
	if c.s.cfg.Demand {
		ch <- ownCtrFair // filled only where demand is measured
	}
}

func (c containerCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.cur.Load()
	if st == nil {
		return
	}
	// Containers are keyed by pod UID, name and ID, so no two series
	// collide.
	seen := map[string]bool{}
	st.eachPod(func(p *aggregate.Pod, pl []string) {
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
			ch <- constMetric(ownCtrMisplaced, prometheus.GaugeValue, b2f(outside), append(cl[:len(cl):len(cl)], ct.Cgroup.Path)...)
		}
	})
}
