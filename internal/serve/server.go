package serve

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/utils/clock"

	"github.com/cgwarden/cgwarden/internal/aggregate"
	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/buildinfo"
	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// DefaultListen is where serve listens unless told otherwise: loopback
// only, on a port nothing in Kubernetes uses by default.
const DefaultListen = "127.0.0.1:9530"

// DefaultInterval is the time between two scans.
const DefaultInterval = 10 * time.Second

// Scan is one scan of the node, as the node loop (package agent) takes it.
type Scan struct {
	// Node is the scan, with its /proc/meminfo, CPU rates and fair share
	// as inventory.Sampling fills them.
	Node *inventory.Node
	// Meta is the metadata the scan named pods with (start times come
	// from it); may be nil.
	Meta *metadata.Set
	// Report is the audit of Node with Meta when the scanner made it
	// already (the node loop audits each scan once, for every consumer);
	// nil: the Server audits the scan itself, at most once.
	Report *audit.Report
}

// FeedSamples serves samples that each carry their own tree (a
// snapshot's), in order, through one inventory.Sampling: a two-sample
// snapshot gives rates and, with Config.Demand, the fair share.
func (s *Server) FeedSamples(samples []cgroupfs.Sample, meta *metadata.Set) error {
	smp := &inventory.Sampling{Meta: meta, Demand: s.cfg.Demand}
	for _, one := range samples {
		sc, err := inventory.Open(one.FS)
		if err != nil {
			return err
		}
		n, err := smp.Take(sc, one.Time)
		if err != nil {
			return err
		}
		s.Feed(Scan{Node: n, Meta: meta})
	}
	return nil
}

// Config configures a Server.
type Config struct {
	// NodeName is the node's name in the Summary API.
	NodeName string
	// Interval is the time between two scans of the loop that feeds the
	// Server (DefaultInterval if 0): the probes' thresholds are counted
	// in it (health.go).
	Interval time.Duration
	// Clock stamps the loop's scans and dates the probes; nil is the
	// wall clock. Tests give the loop's and the Server's one fake clock.
	Clock  clock.PassiveClock
	Logger *slog.Logger
	// Findings serves cgwarden_audit_findings, the scan's audit findings
	// per rule and severity (CountFindings); false leaves it out.
	Findings bool
	// Collectors are served on /metrics beside cgwarden's own (the weight
	// holder's, the steady-state scan's).
	Collectors []prometheus.Collector
	// Demand computes the demand-aware fair share of snapshots fed
	// (FeedSamples), as the node loop does for live scans: serve's
	// --demand sets both. Without it the cgwarden_*_cpu_fair_cores series
	// are not served.
	Demand bool
	// NRIMetrics is the loopback address of `cgwarden nri`'s metrics
	// listener, relayed on NRIMetricsPath ("": not served).
	NRIMetrics string
}

// FindingCount is the number of audit findings of one rule and severity.
type FindingCount struct {
	Rule, Severity string
	Count          int
}

// Server serves the latest scan it was fed: by the node loop (package
// agent: Scanned, Looping, MetaFailed) or from a snapshot (FeedSamples).
// It scans nothing itself.
type Server struct {
	cfg Config
	log *slog.Logger
	cur atomic.Pointer[state]

	// Owned by the feeding loop (one goroutine at a time).
	metaBad bool

	own    *prometheus.Registry
	loop   *loopMetrics
	probes health
}

// New builds a Server; the node loop (live) or FeedSamples (a snapshot)
// gives it data.
func New(cfg Config) *Server {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "serve")}
	s.loop = newLoopMetrics()
	// cgwarden_build_info follows the Prometheus convention for build
	// information (prometheus_build_info, node_exporter_build_info): a
	// gauge of 1 whose labels name the build, so dashboards can join on it.
	in := buildinfo.Get()
	build := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cgwarden_build_info",
		Help:        "A metric with a constant '1' value labeled by the version, VCS commit and Go version cgwarden was built from.",
		ConstLabels: prometheus.Labels{"version": in.Version, "revision": in.Commit(), "goversion": in.GoVersion}}, func() float64 { return 1 })
	s.own = prometheus.NewRegistry()
	s.own.MustRegister(s.loop.scans, s.loop.failures, s.loop.duration, s.loop.metaFailures,
		podCollector{s}, containerCollector{s}, nodeCollector{s}, build,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector())
	s.own.MustRegister(cfg.Collectors...)
	return s
}

// state is one scan, immutable once stored, with the kubelet formats
// rendered lazily at most once.
type state struct {
	time      time.Time
	node      *inventory.Node
	nodeName  string
	nodeUsage aggregate.Usage
	pods      []aggregate.Pod
	findings  []FindingCount
	meta      *metadata.Set
	log       *slog.Logger
	// report is the scan's audit (made once: for the findings on
	// /metrics and for /audit alike).
	report     *audit.Report
	reportOnce sync.Once
	// failed is set when the latest scan attempt failed: the figures are
	// those of the scan before (the kubelet's resource_scrape_error).
	failed bool

	resource, resourceGz   lazy
	summary, summaryGz     lazy
	audit, auditGz         lazy
	inventory, inventoryGz lazy
}

type lazy struct {
	once sync.Once
	b    []byte
	err  error
}

func (l *lazy) get(render func() ([]byte, error)) ([]byte, error) {
	l.once.Do(func() { l.b, l.err = render() })
	return l.b, l.err
}

// Feed makes smp the served scan (its rates are the scanner's). Feed,
// FeedSamples, Scanned, Looping and MetaFailed are the feeding side: call
// them from one goroutine at a time. Handler is safe for any number of
// requests.
func (s *Server) Feed(smp Scan) {
	st := &state{
		time: smp.Node.Time, node: smp.Node, nodeName: s.cfg.NodeName, meta: smp.Meta, report: smp.Report, log: s.log,
		nodeUsage: aggregate.NodeUsage(smp.Node),
		pods:      aggregate.Pods(smp.Node),
	}
	if s.cfg.Findings {
		st.findings = CountFindings(st.auditReport())
	}
	s.cur.Store(st)
}

// auditReport is the state's audit: the scan's, else made once here.
func (st *state) auditReport() *audit.Report {
	st.reportOnce.Do(func() {
		if st.report == nil {
			st.report = audit.Run(&audit.Input{Node: st.node, Meta: st.meta})
		}
	})
	return st.report
}

// Ready reports whether a scan has been served.
func (s *Server) Ready() bool { return s.cur.Load() != nil }

// Scanned records one scan of a loop outside the Server (the node
// agent's): its duration, and either serves it or, when err is set, keeps
// serving the scan before, marked failed.
func (s *Server) Scanned(smp Scan, took time.Duration, err error) {
	s.loop.duration.Observe(took.Seconds())
	s.loop.scans.Inc()
	if err != nil {
		s.loop.failures.Inc()
		if old := s.cur.Load(); old != nil && !old.failed {
			s.cur.Store(&state{time: old.time, node: old.node, nodeName: old.nodeName, nodeUsage: old.nodeUsage,
				pods: old.pods, findings: old.findings, meta: old.meta, log: old.log, report: old.auditReport(), failed: true})
		}
		return
	}
	s.Feed(smp)
	s.probes.good.Store(stamp(s.cfg.Clock.Now()))
}

// Looping records that the scan loop feeding the Server (the node
// agent's) started or completed a scan, good or failed: /healthz then
// fails when it stops doing so, and /readyz when the last good scan grows
// stale (health.go). A Server fed without a loop (a snapshot) never goes
// stale.
func (s *Server) Looping() { s.probes.loop.Store(stamp(s.cfg.Clock.Now())) }

// MetaFailed records that the pod metadata source failed (err) or, with
// nil, answered again with n pods; an outage is logged once.
func (s *Server) MetaFailed(err error, n int) {
	if err != nil {
		s.loop.metaFailures.Inc()
		if !s.metaBad {
			s.log.Warn("pod metadata unavailable; serving pods under the names last known, or their UIDs", "err", err)
		}
		s.metaBad = true
		return
	}
	if s.metaBad {
		s.log.Info("pod metadata available again", "pods", n)
	}
	s.metaBad = false
}

// Handler serves every endpoint.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics/resource", s.serveResource)
	mux.HandleFunc("GET /stats/summary", s.serveSummary)
	mux.HandleFunc("GET /audit", s.serveAudit)
	mux.HandleFunc("GET /inspect", s.serveInspect)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.own, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelError)}))
	if s.cfg.NRIMetrics != "" {
		mux.Handle("GET "+NRIMetricsPath, nriRelay(s.cfg.NRIMetrics, s.log))
	}
	s.health(mux)
	return mux
}

// LocalHandler serves the node's audit and inventory (/audit, /inspect)
// and health, nothing else: what `kubectl cgwarden` reads through a
// port-forward on the loopback listener (--local-listen). serve puts it
// behind the same Auth as Handler (with --authenticate): the plugin sends
// the user's token. The kubelet-format and Prometheus endpoints are only
// on the main listener.
func (s *Server) LocalHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /audit", s.serveAudit)
	mux.HandleFunc("GET /inspect", s.serveInspect)
	s.health(mux)
	return mux
}

func (s *Server) latest(w http.ResponseWriter) *state {
	st := s.cur.Load()
	if st == nil {
		http.Error(w, "no scan completed yet", http.StatusServiceUnavailable)
	}
	return st
}

func (s *Server) serveResource(w http.ResponseWriter, r *http.Request) {
	st := s.latest(w)
	if st == nil {
		return
	}
	s.write(w, r, resourceContentType, &st.resource, &st.resourceGz, st.renderResource)
}

// write sends a state's rendering, gzipped when the client accepts it
// (Prometheus and Go clients do). Both forms are made at most once per
// scan and shared by every request.
func (s *Server) write(w http.ResponseWriter, r *http.Request, contentType string, plain, gz *lazy, render func() ([]byte, error)) {
	b, err := plain.get(render)
	if err == nil && acceptsGzip(r) {
		b, err = gz.get(func() ([]byte, error) { return gzipped(b) })
		w.Header().Set("Content-Encoding", "gzip")
	}
	if err != nil {
		w.Header().Del("Content-Encoding")
		s.log.Error("rendering", "path", r.URL.Path, "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Vary", "Accept-Encoding")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

func gzipped(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (s *Server) serveSummary(w http.ResponseWriter, r *http.Request) {
	// The kubelet accepts only_cpu_and_memory=true to leave out network,
	// filesystem and volume figures; cgwarden serves CPU and memory only,
	// so both forms are the same document.
	if v := r.URL.Query().Get("only_cpu_and_memory"); v != "" && v != "true" && v != "false" {
		http.Error(w, "only_cpu_and_memory: want true or false", http.StatusBadRequest)
		return
	}
	st := s.latest(w)
	if st == nil {
		return
	}
	s.write(w, r, "application/json", &st.summary, &st.summaryGz, st.renderSummary)
}

// CheckLocalListen accepts only a loopback address for --local-listen:
// what is served there is plain HTTP, and is meant to be reached
// through the API server's pods/portforward (which connects to the pod's
// loopback) or from the node itself.
func CheckLocalListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--local-listen %q: %w", addr, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("--local-listen %q: bad port: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--local-listen %q: want a loopback IP address (127.0.0.1 or ::1): it serves plain HTTP", addr)
	}
	return nil
}

// CheckListen refuses a non-loopback listen address unless allowRemote:
// the endpoints show every pod on the node and are not authenticated.
func CheckListen(addr string, allowRemote bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", addr, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("--listen %q: bad port: %w", addr, err)
	}
	if allowRemote {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	what := host
	if host == "" {
		what = "every interface"
	}
	return fmt.Errorf("--listen %q would serve on %s, beyond this host; the endpoints are unauthenticated, so pass --allow-remote to mean it (or listen on 127.0.0.1)", addr, what)
}
