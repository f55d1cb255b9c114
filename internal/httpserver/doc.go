// Package httpserver holds the one HTTP server constructor of cgwarden's
// processes: the agent's kubelet-format endpoints (serve), the sizer's
// admission webhook and the NRI plugin's /metrics. Each gets every timeout
// net/http knows and a header limit, so that no client — a stalled
// scraper, a slowloris — holds a goroutine and a descriptor for as long as
// it likes; only the values differ by what each server answers. Listen
// is the listener of the servers on the host's network (the agent's, the
// NRI plugin's): SO_REUSEPORT, so that the new pod of a DaemonSet update
// with maxSurge listens beside the old one.
package httpserver
