package serve

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgwarden/cgwarden/internal/inventory"
)

var (
	steadyOpen       = prometheus.NewDesc("cgwarden_scan_open_files", "Cgroup counter files the steady-state scan keeps open, to read them with one pread each interval.", nil, nil)
	steadyOpenMax    = prometheus.NewDesc("cgwarden_scan_open_files_max", "Bound on the counter files kept open; past it files are opened at each read.", nil, nil)
	steadyUnkept     = prometheus.NewDesc("cgwarden_scan_unkept_reads_total", "Counter reads done with open+read+close because the bound on open files was reached.", nil, nil)
	steadyWatches    = prometheus.NewDesc("cgwarden_scan_watches", "inotify watches on cgroup directories (children and settings changes).", nil, nil)
	steadyWatchFails = prometheus.NewDesc("cgwarden_scan_watch_failures_total", "Cgroups that could not be watched (inotify limit): they are listed and their settings read at every scan.", nil, nil)
	steadyListings   = prometheus.NewDesc("cgwarden_scan_listings_total", "Cgroup directory listings, by whether the steady-state scan read them or kept the last one (nothing changed).", []string{"result"}, nil)
	steadySettings   = prometheus.NewDesc("cgwarden_scan_settings_total", "Cgroup settings (weights, quotas, limits), by whether the steady-state scan read them or kept the last ones (nothing changed).", []string{"result"}, nil)
	steadyEvents     = prometheus.NewDesc("cgwarden_scan_events_total", "inotify events taken by the steady-state scan.", nil, nil)
	steadyOverflows  = prometheus.NewDesc("cgwarden_scan_event_overflows_total", "Times inotify events were lost and every listing and setting was read again.", nil, nil)
	steadyForgotten  = prometheus.NewDesc("cgwarden_scan_forgotten_cgroups_total", "Cgroups dropped by the steady-state scan (removed), their files closed and watches removed.", nil, nil)
)

// steadyCollector serves what a steady-state scan holds and has done.
type steadyCollector struct{ st *inventory.Steady }

// SteadyCollector serves the descriptors, watches and reads of st (the
// counts it takes are read under the scan loop's feet: they are counters
// and gauges of a moment, not of one scan).
func SteadyCollector(st *inventory.Steady) prometheus.Collector { return steadyCollector{st} }

// Describe describes what Collect sends: Collect sends every series at
// each call, whatever the scan has seen, and reads only counts kept in
// memory (Steady.Counts), so calling it to describe is free and exact.
func (c steadyCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c steadyCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.st.Counts()
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge(steadyOpen, float64(n.Kept.Open))
	gauge(steadyOpenMax, float64(n.Kept.Max))
	counter(steadyUnkept, n.Kept.Unkept)
	gauge(steadyWatches, float64(n.Watches))
	counter(steadyWatchFails, uint64(n.WatchFailures))
	counter(steadyListings, n.Listings, "read")
	counter(steadyListings, n.ListingsKept, "kept")
	counter(steadySettings, n.SettingsReads, "read")
	counter(steadySettings, n.SettingsKept, "kept")
	counter(steadyEvents, n.Events)
	counter(steadyOverflows, n.Overflows)
	counter(steadyForgotten, n.Forgotten)
}
