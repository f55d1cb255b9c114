package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cgwarden/cgwarden/internal/apiconn"
	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/events"
	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/podsource"
	"github.com/cgwarden/cgwarden/internal/serve"
	"github.com/cgwarden/cgwarden/internal/sizetrust"
)

// serveOptions are serve's flags.
type serveOptions struct {
	listen      string
	localListen string
	allowRemote bool
	interval    Duration
	metaMode    string
	criSocket   string
	kubeconfig  string
	nodeName    string
	tlsCert     string
	tlsKey      string
	keep        serveFix
	authn       bool
	events      bool
	demand      bool
	fullScans   bool
	// trustSizes is --trust-size-annotations.
	trustSizes string
	// wrap wraps every API client's transport (watchAPI).
	wrap func(http.RoundTripper) http.RoundTripper
}

// newServeOptions are serve's options before flags are parsed.
func newServeOptions() *serveOptions {
	return &serveOptions{interval: Duration(serve.DefaultInterval)}
}

func newServe(o *Options) *cobra.Command {
	so := newServeOptions()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve pod and container CPU and memory from where the processes really are, in the kubelet's formats (/metrics/resource, /stats/summary) and as Prometheus metrics (/metrics)",
		Long: `serve scans the node's cgroups once per --interval and serves the latest scan:
  /metrics/resource  the kubelet's resource metrics (for metrics-server)
  /stats/summary     the kubelet's Summary API (CPU and memory)
  /metrics           cgwarden's own metrics
  /audit, /inspect   the node's audit and inventory, as audit and inspect -o json write them
                     (also on --local-listen, for kubectl cgwarden; with --authenticate, a token there too)
  /healthz, /readyz  health; ready once the first scan completed
Pod figures include containers a runtime put outside the pod's cgroup. With --snapshot it serves the snapshot's scan.

With --fix it also keeps the node fixed: misplaced-container adopts misplaced containers every
--interval; size-blind-weights and besteffort-starvation hold the weights of sized BestEffort pods
(VMs) against the kubelet, restoring any overwrite within milliseconds (inotify) and following new
pods and size changes. Every first change is journaled: stop serve, then 'cgwarden revert --all'.`,
		Example: `  cgwarden serve
  cgwarden serve --listen 0.0.0.0:10250 --allow-remote --tls-cert-file tls.crt --tls-private-key-file tls.key
  cgwarden serve --snapshot example:seed-003-k3s-spin   # then: curl 127.0.0.1:9530/metrics/resource
  cgwarden serve --pods pods.json --vms vms.json --fix size-blind-weights,besteffort-starvation`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd.Context(), o, so) },
	}
	so.addFlags(cmd.Flags(), o)
	return cmd
}

func (so *serveOptions) addFlags(f *pflag.FlagSet, o *Options) {
	f.StringVar(&so.listen, "listen", serve.DefaultListen, "address to serve on; beyond loopback needs --allow-remote")
	f.StringVar(&so.localListen, "local-listen", "", "also serve the node's audit and inventory (/audit, /inspect, as audit and inspect -o json write them) and health, in plain HTTP, on this loopback `ADDR`: what kubectl cgwarden reaches through the API server's pods/portforward (off when empty); with --authenticate a bearer token is checked there as on --listen (nodes/stats), kubectl cgwarden sends the user's")
	f.BoolVar(&so.allowRemote, "allow-remote", false, "allow a --listen address reachable from other hosts (use --authenticate there, or a network policy)")
	f.Var(&so.interval, "interval", "time between two scans; every request reads the latest scan")
	f.StringVar(&so.metaMode, "metadata", podsource.Auto, "where pod and container names come from: "+strings.Join(podsource.Modes, ", ")+" (auto: --pods if given, else the CRI socket, else the Kubernetes API)")
	f.StringVar(&so.criSocket, "cri-socket", "", "CRI runtime socket (default: the first of "+strings.Join(podsource.DefaultCRISockets, ", ")+" that exists)")
	f.StringVar(&so.kubeconfig, "kubeconfig", "", "kubeconfig for the Kubernetes metadata source (default: in-cluster config)")
	f.StringVar(&so.nodeName, "node-name", "", "this node's name (default: $NODE_NAME, else the hostname)")
	f.StringVar(&so.tlsCert, "tls-cert-file", "", "serve HTTPS with this certificate (PEM), as metrics-server expects of a kubelet")
	f.StringVar(&so.tlsKey, "tls-private-key-file", "", "private key (PEM) of --tls-cert-file")
	f.BoolVar(&so.authn, "authenticate", false, "like the kubelet: serve HTTPS and accept only bearer tokens a TokenReview accepts and a SubjectAccessReview allows get on nodes/metrics (/metrics, /metrics/resource) or nodes/stats (/stats/summary); health endpoints stay open. Uses --kubeconfig or the in-cluster config")
	f.BoolVar(&so.events, "events", false, "report each new finding and each applied fix as a Kubernetes Event on its pod (needs --kubeconfig or in-cluster; aggregated and rate-limited, at most 20 finding Events per scan)")
	f.BoolVar(&so.fullScans, "full-scans", false, "read every cgroup file at every scan, as one-shot commands do, instead of steady-state scans (counter files kept open, listings and settings read again only when inotify says they changed, and at least every 60 scans); for comparison and debugging")
	f.BoolVar(&so.demand, "demand", false, "also measure every cgroup's CPU demand and serve its fair share (cgwarden_*_cpu_fair_cores); reads every thread's schedstat at each scan, the largest cost of a scan on a busy node")
	f.StringVar(&so.trustSizes, "trust-size-annotations", "", "believe the "+metadata.AnnotationCPU+" annotation of pods in these `NAMESPACES` (comma-separated, or * for all); without it, or beyond it, the annotation counts only while the size policy (ValidatingAdmissionPolicy and binding "+sizetrust.PolicyName+", deploy/kustomize/size-policy) is installed, checked every 10 minutes. VM objects count always; every size is capped at the Node's allocatable CPU")
	so.keep.flags(f)
	addVMs(f, o)
}

func (so *serveOptions) validate(o *Options) error {
	if err := serve.CheckListen(so.listen, so.allowRemote); err != nil {
		return err
	}
	if so.localListen != "" {
		if err := serve.CheckLocalListen(so.localListen); err != nil {
			return err
		}
	}
	if so.interval <= 0 {
		return fmt.Errorf("--interval must be above 0")
	}
	if len(so.keep.rules) > 0 && o.Snapshot != "" {
		return fmt.Errorf("--fix changes the live node; it cannot be used with --snapshot")
	}
	if _, err := metadata.ParseNamespaces(so.trustSizes); err != nil {
		return fmt.Errorf("--trust-size-annotations: %w", err)
	}
	return nil
}

// runServe validates, builds the server (from the snapshot or the live
// host) and serves until SIGTERM or SIGINT.
func runServe(ctx context.Context, o *Options, so *serveOptions) error {
	if err := so.validate(o); err != nil {
		return err
	}
	log := slog.Default()
	so.watchAPI(log)
	tlsConfig, err := serve.LoadTLS(so.tlsCert, so.tlsKey)
	if err != nil {
		return err
	}
	nodeName := serve.NodeName(so.nodeName)
	auth, tlsConfig, err := serveAuth(so.authn, so.kubeconfig, nodeName, so.listen, so.allowRemote, tlsConfig, so.wrap)
	if err != nil {
		return err
	}
	if auth == nil && so.localListen != "" {
		log.Warn("--local-listen without --authenticate: any process on the node reads the node's audit and inventory on " + so.localListen)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	lister, source, err := podsource.Open(ctx, so.sourceConfig(o, nodeName), log)
	if err != nil {
		return err
	}
	note, stopEvents, err := serveEvents(so.events, so.kubeconfig, nodeName, so.wrap, log)
	if err != nil {
		return err
	}
	defer stopEvents()
	srv, cleanup, err := so.server(ctx, o, nodeName, lister, log, note, auth)
	if err != nil {
		return err
	}
	defer cleanup()
	return serve.ServeEndpoints(ctx, log, so.endpoints(srv, auth, tlsConfig,
		"node", nodeName, "metadata", source, "interval", time.Duration(so.interval).String(), "snapshot", o.Snapshot)...)
}

// endpoints are the listeners: --listen and, with --local-listen, the
// loopback one for kubectl cgwarden; both behind auth when given (one
// authenticator: one cache, one cap on reviews).
func (so *serveOptions) endpoints(srv *serve.Server, auth *serve.Auth, tlsConfig *tls.Config, attrs ...any) []serve.Endpoint {
	handler, local := srv.Handler(), srv.LocalHandler()
	if auth != nil {
		handler, local = auth.Wrap(handler), auth.Wrap(local)
	}
	eps := []serve.Endpoint{{Addr: so.listen, Handler: handler, TLS: tlsConfig, Attrs: attrs}}
	if so.localListen != "" {
		eps = append(eps, serve.Endpoint{Addr: so.localListen, Handler: local, Attrs: []any{"serves", "/audit, /inspect (kubectl cgwarden, through pods/portforward)", "authenticated", auth != nil}})
	}
	return eps
}

// sourceConfig is where pod names come from. A snapshot comes from
// another node: only a file can name its pods.
func (so *serveOptions) sourceConfig(o *Options, nodeName string) podsource.Config {
	mode := so.metaMode
	if o.Snapshot != "" && mode == podsource.Auto {
		mode = podsource.None
		if o.PodsFile != "" {
			mode = podsource.File
		}
	}
	return podsource.Config{Mode: mode, CRISocket: so.criSocket, HostRoot: o.HostRoot,
		Kubeconfig: so.kubeconfig, NodeName: nodeName, PodsFile: o.PodsFile, WrapTransport: so.wrap}
}

// watchAPI makes every API client of serve report to one apiconn.Reach,
// which logs once when the API server stops answering and once when it
// answers again, and routes client-go's own log lines (klog: reflector
// and Event retries) into serve's log, folded, and dropped while the API
// server is away — an outage is then two lines, not one per retry.
func (so *serveOptions) watchAPI(log *slog.Logger) {
	reach := apiconn.NewReach(log, time.Now)
	apiconn.RouteKlog(log, reach)
	so.wrap = reach.Wrap
}

// server builds the server: fed from the snapshot, or scanning the live
// host (and keeping it fixed with --fix) until cleanup is called.
func (so *serveOptions) server(ctx context.Context, o *Options, nodeName string, lister podsource.Lister, log *slog.Logger, note *events.Notifier, auth *serve.Auth) (*serve.Server, func(), error) {
	cfg := serve.Config{NodeName: nodeName, Interval: time.Duration(so.interval), Logger: log, Findings: findingsWithEvents(note), Demand: so.demand}
	if auth != nil {
		cfg.Collectors = append(cfg.Collectors, auth) // cgwarden_auth_*
	}
	if lister != nil {
		cfg.Lister = lister
	}
	if o.Snapshot != "" {
		srv := serve.New(cfg)
		return srv, func() {}, feedSnapshot(ctx, srv, o.Snapshot, lister)
	}
	host, err := cgroupfs.OpenHost(o.HostRoot)
	if err != nil {
		return nil, nil, err
	}
	sc, steady, err := steadyScanner(host, !so.fullScans)
	if err != nil {
		host.Close()
		return nil, nil, err
	}
	cfg.Sampler = &serve.ScannerSampler{Scanner: sc, Demand: so.demand}
	trust := so.sizeTrust(ctx, nodeName, log)
	cfg.Trust = trust
	if steady != nil {
		cfg.Collectors = append(cfg.Collectors, serve.SteadyCollector(steady))
	}
	var ls hold.Lister
	if lister != nil {
		ls = lister
	}
	live := liveVMs(ctx, len(so.keep.rules) > 0, so.metaMode, so.kubeconfig, so.wrap, log)
	fx, err := so.keep.newFixers(host, ls, o.VMsFile, live, trust, time.Duration(so.interval), log, note)
	if err != nil {
		closeSteady(steady)
		host.Close()
		return nil, nil, err
	}
	if fx != nil {
		cfg.Collectors = append(cfg.Collectors, fx.collectors...)
	}
	srv := serve.New(cfg)
	// The scan loop and the fixers read through host: stop them, and
	// wait for them, before host is closed.
	runCtx, stopRun := context.WithCancel(ctx)
	stopLoop := srv.Start(runCtx)
	stopFix := fx.run(runCtx, log)
	return srv, func() { stopRun(); stopLoop(); stopFix(); closeSteady(steady); host.Close() }, nil
}

// sizeTrust starts the live agent's check of which pod sizes it may
// believe (sizetrust): the flag's namespaces, the size policy and the
// Node's allocatable CPU, read from the API server when there is one. A
// pods file given to a live serve is trusted no more than the API: the
// agent acts on it.
func (so *serveOptions) sizeTrust(ctx context.Context, nodeName string, log *slog.Logger) func() metadata.Trust {
	ns, _ := metadata.ParseNamespaces(so.trustSizes) // checked by validate
	ch := &sizetrust.Checker{Node: nodeName, Namespaces: ns, Log: log.With("component", "sizetrust")}
	if rc, err := restConfig(so.kubeconfig, so.wrap); err == nil {
		if g, err := sizetrust.NewGetter(rc); err == nil {
			ch.API = g
		}
	}
	ch.Refresh(ctx)
	go ch.Run(ctx)
	return ch.Trust
}

// steadyScanner is the scanner of serve's loop: with steady, steady-state
// scans of the live host (inventory.Steady), every scan after the first
// reading only what can have changed; without, full scans (st is nil).
func steadyScanner(host *cgroupfs.Host, steady bool) (sc *inventory.Scanner, st *inventory.Steady, err error) {
	sc, err = inventory.Open(host)
	if err != nil || !steady {
		return sc, nil, err
	}
	st, err = inventory.NewSteady(sc, host, inventory.SteadyOptions{})
	if err != nil {
		return nil, nil, err
	}
	return sc, st, nil
}

// feedSnapshot serves a snapshot: its samples are fed in order, so a
// two-sample snapshot gives rates; nothing is rescanned afterwards.
func feedSnapshot(ctx context.Context, srv *serve.Server, name string, lister podsource.Lister) error {
	snap, err := LoadSnapshot(name)
	if err != nil {
		return err
	}
	if w := SnapshotWarning(name, snap); w != "" {
		slog.Warn(w)
	}
	var meta *metadata.Set
	if lister != nil {
		pods, err := lister.Pods(ctx)
		if err != nil {
			slog.Warn("pod metadata unavailable; serving pods by UID", "err", err)
		} else {
			meta = metadata.NewSet(pods)
		}
	}
	if err := srv.FeedSamples(snap.Samples, meta); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

func closeSteady(st *inventory.Steady) {
	if st != nil {
		st.Close()
	}
}
