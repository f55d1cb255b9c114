package serve

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgwarden/cgwarden/internal/aggregate"
	"github.com/cgwarden/cgwarden/internal/inventory"
)

// cgwarden's own per-pod series on /metrics. Pod figures are the corrected
// ones (package aggregate); the pod cgroup's own figure, which is what the
// kubelet reports, is beside them so the gap can be graphed and alerted
// on.
var (
	podLabels = []string{"namespace", "pod", "uid"}

	ownPodCPU       = prometheus.NewDesc("cgwarden_pod_cpu_usage_seconds_total", "CPU time used by the pod's processes wherever their cgroups live (misplaced containers included), in core-seconds.", podLabels, nil)
	ownPodCgroupCPU = prometheus.NewDesc("cgwarden_pod_cgroup_cpu_usage_seconds_total", "CPU time accounted to the pod cgroup itself, what the kubelet reports for the pod, in core-seconds.", podLabels, nil)
	ownPodCores     = prometheus.NewDesc("cgwarden_pod_cpu_usage_cores", "CPU the pod used between the last two scans, in cores.", podLabels, nil)
	ownPodWS        = prometheus.NewDesc("cgwarden_pod_memory_working_set_bytes", "Working set of the pod's processes wherever their cgroups live (usage minus inactive file pages), in bytes.", podLabels, nil)
	ownPodRSS       = prometheus.NewDesc("cgwarden_pod_memory_rss_bytes", "Anonymous memory of the pod's processes wherever their cgroups live, in bytes.", podLabels, nil)
	ownPodWeight    = prometheus.NewDesc("cgwarden_pod_cpu_weight", "Raw CPU weight of the pod cgroup (cgroup v1 cpu.shares or v2 cpu.weight).", podLabels, nil)
	ownPodGuar      = prometheus.NewDesc("cgwarden_pod_cpu_guaranteed_cores", "CPU the pod cgroup is guaranteed when every cgroup on the node is busy, in cores.", podLabels, nil)
	ownPodFair      = prometheus.NewDesc("cgwarden_pod_cpu_fair_cores", "Demand-aware fair share of CPU of the pod cgroup, in cores.", podLabels, nil)
	ownPodDeclared  = prometheus.NewDesc("cgwarden_pod_cpu_declared_cores", "CPU size the pod declares beyond its requests, in cores: its VM's size (a NeonVM runner's -vmspec) or the cgwarden.io/cpu annotation, what the size-blind-weights fix weighs it by; only for pods that declare one.", podLabels, nil)
	// ownPodNotBelieved says out loud that a declared size buys nothing:
	// the pod keeps the kubelet's weight (why: the startup log and the
	// audit's ignored-size finding).
	ownPodNotBelieved = prometheus.NewDesc("cgwarden_pod_cpu_size_not_believed", "1 for a pod that declares a CPU size (a VM object, a runner's -vmspec, the cgwarden.io/cpu annotation) that is not believed or not taken: the pod keeps the kubelet's weight; the audit's ignored-size finding says why. Only for such pods.", podLabels, nil)
	ownPodMisplaced   = prometheus.NewDesc("cgwarden_pod_misplaced", "1 if at least one of the pod's container or sandbox cgroups lives outside the pod cgroup, else 0.", podLabels, nil)
)

// podCollector reads the pods of the state being served at each scrape.
type podCollector struct{ s *Server }

var _ prometheus.Collector = podCollector{}

func (c podCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{ownPodCPU, ownPodCgroupCPU, ownPodCores, ownPodWS, ownPodRSS, ownPodWeight, ownPodGuar, ownPodDeclared, ownPodNotBelieved, ownPodMisplaced} {
		ch <- d
	}
	if c.s.cfg.Demand {
		ch <- ownPodFair // filled only where demand is measured
	}
}

func (c podCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.cur.Load()
	if st == nil {
		return
	}
	st.eachPod(func(p *aggregate.Pod, pl []string) {
		usage(ch, ownPodCPU, ownPodCores, ownPodWS, p.Usage, pl)
		if v := p.Usage.RSSBytes; v != nil {
			ch <- constMetric(ownPodRSS, prometheus.GaugeValue, float64(*v), pl...)
		}
		if p.Cgroup != nil {
			if v := p.Cgroup.Stats.CPU.UsageNs; v != nil {
				ch <- constMetric(ownPodCgroupCPU, prometheus.CounterValue, seconds(*v), pl...)
			}
			cgroupCPU(ch, ownPodWeight, ownPodGuar, ownPodFair, p.Cgroup, pl)
		}
		// A size the metadata declares but refuses (not a quantity, 0,
		// beyond any node) is left out, as the fix leaves the pod alone.
		switch sz, ok, err := st.meta.DeclaredSize(p.UID); {
		case ok:
			ch <- constMetric(ownPodDeclared, prometheus.GaugeValue, float64(sz.MilliCPU)/1000, pl...)
		case err != nil:
			ch <- constMetric(ownPodNotBelieved, prometheus.GaugeValue, 1, pl...)
		}
		ch <- constMetric(ownPodMisplaced, prometheus.GaugeValue, b2f(p.Outside), pl...)
	})
}

// eachPod calls fn with each pod of the state once, by UID (which is
// unique, so no two series collide), and the pod's labels.
func (st *state) eachPod(fn func(p *aggregate.Pod, labels []string)) {
	seen := map[string]bool{}
	for i := range st.pods {
		p := &st.pods[i]
		if seen[p.UID] {
			continue
		}
		seen[p.UID] = true
		fn(p, []string{p.Namespace, podName(p), p.UID})
	}
}

// usage sends the usage series of a pod or container.
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

// cgroupCPU sends the CPU weight, guarantee and fair share of a pod or
// container cgroup.
func cgroupCPU(ch chan<- prometheus.Metric, weight, guar, fair *prometheus.Desc, c *inventory.Cgroup, labels []string) {
	if v := c.Stats.CPU.Weight; v != nil {
		ch <- constMetric(weight, prometheus.GaugeValue, float64(*v), labels...)
	}
	ch <- constMetric(guar, prometheus.GaugeValue, c.GuaranteedCores, labels...)
	if v := c.FairCores; v != nil {
		ch <- constMetric(fair, prometheus.GaugeValue, *v, labels...)
	}
}
