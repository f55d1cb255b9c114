package sizer

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/cgwarden/cgwarden/internal/apiconn"
	"github.com/cgwarden/cgwarden/internal/httpserver"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// Options configure the sizer (cgwarden-sizer's flags: internal/sizercmd).
type Options struct {
	// Listen is the webhook's HTTPS address (also /healthz, /readyz,
	// /metrics).
	Listen string
	// Kubeconfig, or in-cluster configuration when empty.
	Kubeconfig string
	// TLSCertFile and TLSKeyFile: a serving certificate managed elsewhere
	// (cert-manager). When empty, the sizer signs its own with the CA in
	// CASecret.
	TLSCertFile, TLSKeyFile string
	// Namespace holds CASecret and the leader election Lease.
	Namespace string
	// CASecret is the Secret that keeps the CA made at install
	// (NewCASecret), whose certificate is the webhook's caBundle. The
	// sizer only reads it.
	CASecret string
	// CertHosts are the DNS names and IPs the serving certificate is for
	// (the Service's names, or 127.0.0.1 for a url: webhook).
	CertHosts []string
	// Controller runs the resize controller; LeaderElect runs it only in
	// the replica holding Lease LeaderElectionID.
	Controller       bool
	LeaderElect      bool
	LeaderElectionID string
	// LeaseDuration, RenewDeadline and RetryPeriod are the leader
	// election's timings (--leader-elect-lease-duration,
	// --leader-elect-renew-deadline, --leader-elect-retry-period, as
	// kube-controller-manager names them; client-go's
	// LeaderElectionConfig): 0 takes DefaultLeaseDuration,
	// DefaultRenewDeadline and DefaultRetryPeriod. CheckLeaderElection
	// says whether client-go will take them.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// MaxSizes is --max-size: the webhook's and the resize controller's
	// requests are held within the bound of the pod's namespace, as the
	// agent holds the sizes it believes (vmsize.MaxSizes).
	MaxSizes vmsize.MaxSizes
	// Coalesce, MaxDelay, MinStep, Workers, EventWindow and CRDRecheck:
	// see Controller.
	Coalesce, MaxDelay, EventWindow, CRDRecheck time.Duration
	MinStep                                     int64
	Workers                                     int
	// QPS and Burst bound the resize controller's API client (client-go's
	// defaults are 5 and 10: about 5 resizes a second).
	QPS   float32
	Burst int
	// WebhookQPS and WebhookBurst bound the webhook's VM lookups, a
	// client and rate limiter of their own (newClients).
	WebhookQPS   float32
	WebhookBurst int
	// PodLevel is --pod-level: where the webhook puts a NeonVM runner
	// pod's CPU request, decided once at start (ProbeLevel; "": auto).
	PodLevel PodLevelMode
	Log      *slog.Logger
}

// dynamicVMs reads VirtualMachines through the dynamic client.
type dynamicVMs struct{ c dynamic.Interface }

func (d dynamicVMs) GetVM(ctx context.Context, ns, name string) (*unstructured.Unstructured, error) {
	return d.c.Resource(VirtualMachines).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}

// Run serves the webhook and runs the resize controller until ctx ends.
func Run(ctx context.Context, o Options) error {
	log := o.Log.With("component", "sizer")
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = o.leaderElection()
	if o.Controller && o.LeaderElect {
		// Before anything serves: client-go would panic in RunOrDie.
		if err := CheckLeaderElection(o.LeaseDuration, o.RenewDeadline, o.RetryPeriod); err != nil {
			return err
		}
	}
	base := o.Log
	rc, err := apiconn.RESTConfig(o.Kubeconfig, nil)
	if err != nil {
		return fmt.Errorf("API server (--kubeconfig, or in-cluster): %w", err)
	}
	rc.UserAgent = "cgwarden-sizer"
	cl, err := newClients(rc, o)
	if err != nil {
		return err
	}
	cs, dyn := cl.cs, cl.dyn
	level := o.level(ctx, cs, log)

	tlsConfig, ca, err := o.serving(ctx, cs, log)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	// The Go collector's usual series, and the live heap as of the last
	// collection (go_gc_heap_live_bytes, runtime/metrics
	// /gc/heap/live:bytes): what the resize controller's caches hold,
	// whenever it is read (the heap in use also holds what was allocated
	// since, up to twice the live heap at GOGC 100). The scale lane's
	// memory test reads it per VM (docs/scale.md).
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := NewMetrics(reg)
	mux := http.NewServeMux()
	if o.MaxSizes.String() != "" {
		log.Info("requests bounded per namespace", "maxSizes", o.MaxSizes.String())
	}
	mux.Handle("POST /mutate", &Webhook{VMs: cl.webhookVMs, Log: base.With("component", "sizer-webhook"), Timeout: 3 * time.Second, Count: metrics.Admission, Level: level,
		MaxSizes: o.MaxSizes})
	// Live: the server answers at all. Ready: it can answer admissions.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("GET /readyz", Ready{Serving: tlsConfig, CA: ca, Now: time.Now})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.Listen, err)
	}
	srv := httpserver.New(mux, webhookTimeouts, tlsConfig, log)
	errc := make(chan error, 2)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	log.Info("webhook serving", "listen", ln.Addr().String())

	if o.Controller {
		// Events are counted as the sink writes them, after client-go's
		// correlator (which may drop or aggregate them).
		rec, stopEvents, err := apiconn.EventRecorder(ctx, rc, corev1.EventSource{Component: "cgwarden-sizer"}, metrics.EventWritten)
		if err != nil {
			return fmt.Errorf("events: %w", err)
		}
		defer stopEvents()
		ctrl := &Controller{
			Client: cs, Dynamic: dyn, Log: base.With("component", "sizer-controller"), Metrics: metrics,
			Events:   rec,
			Coalesce: o.Coalesce, MaxDelay: o.MaxDelay, MinStep: o.MinStep, Workers: o.Workers,
			EventWindow: o.EventWindow, Recheck: o.CRDRecheck, MaxSizes: o.MaxSizes,
		}
		go func() { errc <- o.runController(ctx, cs, ctrl, log) }()
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutCtx)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// probeTimeout bounds ProbeLevel's node list at start (ten pages of 500
// nodes take a few seconds).
const probeTimeout = 30 * time.Second

// level decides, once, where the webhook puts a runner pod's CPU
// request, and says so. A probe that fails keeps the container request:
// every Kubernetes version the sizer supports resizes it in place.
func (o Options) level(ctx context.Context, cs kubernetes.Interface, log *slog.Logger) Level {
	mode := o.PodLevel
	if mode == "" {
		mode = PodLevelAuto
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	l, why, err := ProbeLevel(ctx, cs, mode)
	if err != nil {
		log.Warn("cannot tell whether the cluster resizes pod-level resources: CPU requests on the VM container", "podLevel", mode, "err", err)
		return LevelContainer
	}
	msg := "CPU requests on the VM container (spec.containers[].resources)"
	if l == LevelPod {
		msg = "CPU requests at pod level (spec.resources), resized in place at pod level"
	}
	log.Info(msg, "requests", l, "podLevel", mode, "because", why)
	return l
}

// clients are the sizer's API clients: the resize controller's (cs,
// dyn) and the webhook's own for its VM lookups, each with a rate limiter
// of its own (client-go gives every client made from a configuration
// without a RateLimiter its own token bucket of QPS and Burst). /mutate
// answers whoever reaches its port; with one budget, a flood of reviews
// would spend the requests the controller's resizes need (and the
// reverse: a burst of resizes would delay admissions past their timeout).
type clients struct {
	cs         kubernetes.Interface
	dyn        dynamic.Interface
	webhookVMs VMGetter
}

func newClients(rc *rest.Config, o Options) (clients, error) {
	crc := rest.CopyConfig(rc)
	crc.QPS, crc.Burst, crc.RateLimiter = o.QPS, o.Burst, nil
	cs, err := kubernetes.NewForConfig(crc)
	if err != nil {
		return clients{}, fmt.Errorf("client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(crc)
	if err != nil {
		return clients{}, fmt.Errorf("dynamic client: %w", err)
	}
	wrc := rest.CopyConfig(rc)
	wrc.QPS, wrc.Burst = o.WebhookQPS, o.WebhookBurst
	if wrc.QPS <= 0 || wrc.Burst < 1 {
		// Options without them (tests, callers other than sizercmd):
		// sizercmd's defaults.
		wrc.QPS, wrc.Burst = 20, 40
	}
	wrc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(wrc.QPS, wrc.Burst)
	wdyn, err := dynamic.NewForConfig(wrc)
	if err != nil {
		return clients{}, fmt.Errorf("webhook's client: %w", err)
	}
	return clients{cs: cs, dyn: dyn, webhookVMs: dynamicVMs{wdyn}}, nil
}

// serving loads the serving certificate files, or signs one with the CA
// of the Secret (and keeps it signed: Serving.Run). It returns the CA the
// certificate must chain to for readiness (nil with files).
func (o Options) serving(ctx context.Context, cs kubernetes.Interface, log *slog.Logger) (*tls.Config, func() []byte, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.TLSCertFile != "" {
		// Re-read on every handshake: cert-manager renews the files in
		// place.
		if _, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile); err != nil {
			return nil, nil, fmt.Errorf("TLS key pair: %w", err)
		}
		tc.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile)
			return &c, err
		}
		return tc, nil, nil
	}
	if o.Namespace == "" || o.CASecret == "" || len(o.CertHosts) == 0 {
		return nil, nil, errors.New("managed certificates need a namespace, the CA Secret's name and the hosts to serve (or give --tls-cert-file and --tls-private-key-file)")
	}
	s := &Serving{Client: cs, Namespace: o.Namespace, Name: o.CASecret, Hosts: o.CertHosts, Now: time.Now, Log: log}
	if _, err := s.Load(ctx); err != nil {
		return nil, nil, err
	}
	log.Info("serving certificate signed by the CA of its Secret", "secret", o.Namespace+"/"+o.CASecret, "hosts", o.CertHosts)
	go s.Run(ctx, CAReloadInterval)
	tc.GetCertificate = s.GetCertificate
	return tc, s.CA, nil
}

// runController runs ctrl, under leader election if asked.
func (o Options) runController(ctx context.Context, cs kubernetes.Interface, ctrl *Controller, log *slog.Logger) error {
	if !o.LeaderElect {
		return ctrl.Run(ctx)
	}
	id, _ := os.Hostname()
	if p := os.Getenv("POD_NAME"); p != "" {
		id = p
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.Namespace, o.LeaderElectionID,
		cs.CoreV1(), cs.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return fmt.Errorf("leader election lock: %w", err)
	}
	var runErr error
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true, Name: o.LeaderElectionID,
		LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				log.Info("leading: resize controller starts", "lease", o.Namespace+"/"+o.LeaderElectionID, "identity", id,
					"leaseDuration", o.LeaseDuration, "renewDeadline", o.RenewDeadline, "retryPeriod", o.RetryPeriod)
				runErr = ctrl.Run(ctx)
			},
			OnStoppedLeading: func() { log.Info("no longer leading: resize controller stops", "identity", id) },
		},
	})
	if runErr == nil && ctx.Err() == nil {
		runErr = errors.New("leader election lost")
	}
	return runErr
}

// The leader election's timings by default: kube-controller-manager's
// and kube-scheduler's (--leader-elect-lease-duration 15s,
// --leader-elect-renew-deadline 10s, --leader-elect-retry-period 2s). A
// replica that dies leaves the resize controller stopped until its Lease
// expires (LeaseDuration after its last renewal) and another replica's
// next try (RetryPeriod): docs/scale.md, "Failover".
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// leaderElection is the options' timings, the defaults for those unset.
func (o Options) leaderElection() (lease, renew, retry time.Duration) {
	return cmp.Or(o.LeaseDuration, DefaultLeaseDuration), cmp.Or(o.RenewDeadline, DefaultRenewDeadline), cmp.Or(o.RetryPeriod, DefaultRetryPeriod)
}

// CheckLeaderElection says, naming the flags, why client-go's
// leaderelection.NewLeaderElector would refuse these timings (RunOrDie
// panics with them, once the webhook already serves; this says so at
// start): each above 0, the lease longer than the renew deadline (a
// leader must give up before another may take over), and the renew
// deadline longer than leaderelection.JitterFactor (1.2) times the retry
// period (a leader tries to renew at least once, jittered, before its
// deadline).
func CheckLeaderElection(lease, renew, retry time.Duration) error {
	switch {
	case lease <= 0 || renew <= 0 || retry <= 0:
		return fmt.Errorf("--leader-elect-lease-duration (%v), --leader-elect-renew-deadline (%v) and --leader-elect-retry-period (%v) must be above 0",
			lease, renew, retry)
	case lease <= renew:
		return fmt.Errorf("--leader-elect-lease-duration (%v) must be longer than --leader-elect-renew-deadline (%v): a leader gives up its Lease before another replica may take it",
			lease, renew)
	case renew <= time.Duration(leaderelection.JitterFactor*float64(retry)):
		return fmt.Errorf("--leader-elect-renew-deadline (%v) must be longer than %v × --leader-elect-retry-period (%v), %v: a leader tries to renew at least once, with client-go's jitter, before it gives up",
			renew, leaderelection.JitterFactor, retry, time.Duration(leaderelection.JitterFactor*float64(retry)))
	}
	return nil
}

// webhookTimeouts bound the sizer's server: the API server waits at most
// 30 s for an admission (timeoutSeconds, 5 here) and sends one
// AdmissionReview of a pod (well under a MB), so a request that takes
// longer to arrive or to be answered is a client holding a goroutine and a
// descriptor, not the API server; idle keep-alive connections are released
// after a while (the API server's client reconnects).
var webhookTimeouts = httpserver.Timeouts{ReadHeader: 10 * time.Second, Read: 15 * time.Second, Write: 15 * time.Second, Idle: 90 * time.Second}
