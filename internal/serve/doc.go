// Package serve is the HTTP side of cgwarden's agent: it serves the
// latest scan of the node in the kubelet's own formats, so that
// metrics-server, Prometheus and the Prometheus Adapter can read pod and
// container CPU and memory from where the processes really are (package
// aggregate), whatever the runtime did with the cgroups. It scans
// nothing itself: the agent's node loop (package agent) feeds it each
// scan (Server.Scanned, Looping, MetaFailed), and a snapshot is fed once
// (Server.FeedSamples).
//
// Endpoints:
//
//   - /metrics/resource: the kubelet's resource metrics (same names, types,
//     HELP texts, label names and millisecond sample timestamps).
//   - /stats/summary: the kubelet Summary API (k8s.io/kubelet stats
//     v1alpha1), CPU and memory of the node, pods and containers.
//   - /metrics: cgwarden's own metrics (cgwarden_*): corrected usage,
//     weights, guaranteed and fair CPU, misplaced flags, scan health.
//   - /metrics/nri (Config.NRIMetrics): `cgwarden nri`'s /metrics, relayed
//     from its loopback listener behind the agent's TLS and
//     authentication, so that Prometheus can scrape the plugin at all.
//   - /healthz (fails when the scan loop has completed no scan for 3
//     intervals) and /readyz (ok once a scan has completed, and fails
//     when the last good scan is over 2 intervals old).
//
// Cost does not depend on the number of scrapers: one scan per interval
// feeds an immutable state that requests read through an atomic pointer;
// the two kubelet formats are rendered at most once per scan and the bytes
// are shared by every request. Requests never trigger scans.
package serve
