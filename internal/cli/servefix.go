package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/events"
	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/nriplugin"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/podsource"
	"github.com/cgwarden/cgwarden/internal/serve"
)

// serveFix are serve's flags for keeping the node fixed.
type serveFix struct {
	rules      []string
	journalDir string
	maxTierCPU string
	check      Duration
}

// fixers are what `serve --fix` runs beside the scan loop.
type fixers struct {
	holder *hold.Holder
	adopt  *fix.Engine
	// adoptMetrics count the adoption loop's runs (with adopt).
	adoptMetrics *hold.AdoptionMetrics
	sizes        hold.Sizes
	interval     time.Duration
	collectors   []prometheus.Collector
	onApply      func(*fix.Result)
	// onAdopt is told of adoption runs: onApply, and the runtime
	// handlers learned for `cgwarden nri`.
	onAdopt func(*fix.Result)
}

// newFixers checks the --fix rules and builds the weight holder (for the
// weight rules) and the adoption engine (for misplaced-container). nil
// when --fix is not given: serve only observes.
func (f *serveFix) newFixers(host *cgroupfs.Host, lister hold.Lister, vmsFile string, live *podsource.VMSource, trust func() metadata.Trust, interval time.Duration, log *slog.Logger, note *events.Notifier) (*fixers, error) {
	if len(f.rules) == 0 {
		return nil, nil
	}
	weights, adopt, maxTier, err := f.parse()
	if err != nil {
		return nil, err
	}
	if lister == nil {
		lister = noPods{}
	}
	src := &hold.MetaSource{Lister: lister, VMsFile: vmsFile, Trust: trust}
	if live != nil {
		src.Live = live
	}
	fx := &fixers{sizes: src.Sizes, interval: interval, onApply: appliedEvents(note)}
	// One journal for both: its lock makes the holder and the adopter
	// wait for each other, not fail each other's runs.
	jn := journal.New(f.journalDir)
	engine := func() *fix.Engine {
		return &fix.Engine{FS: host, JournalDir: f.journalDir, Journal: jn, Log: log.With("component", "fix")}
	}
	if len(weights) > 0 {
		h, err := hold.New(hold.Config{Host: host, Rules: weights, MaxTierMilliCPU: maxTier, Sizes: src.Sizes,
			Check: time.Duration(f.check), Resync: max(interval, time.Second) * 6, Log: log, OnApply: fx.onApply, Engine: engine()})
		if err != nil {
			return nil, err
		}
		fx.holder = h
		fx.collectors = append(fx.collectors, h)
	}
	if adopt {
		fx.adopt = engine()
		fx.adoptMetrics = hold.NewAdoptionMetrics()
		fx.collectors = append(fx.collectors, fx.adoptMetrics)
		fx.adopt.Steady = true // one plan per interval: steady-state scans
		fx.onAdopt = bothApplied(fx.onApply, learnHandlers(filepath.Join(f.journalDir, nriplugin.LearnedFile), fx.adopt, log))
	}
	return fx, nil
}

// learnHandlers notes in the file at path (read by `cgwarden nri`) the
// CRI runtime handler of each pod whose misplaced container an adoption
// moved out of a runtime-literal "<slice>:<prefix>:<id>" cgroup (adoption
// moves only containers the metadata confirms): that handler's new
// containers can then be placed right before they start. Pods are looked up in the engine's metadata of the run (the
// CRI names handlers; other sources leave them unknown, and nothing is
// learned).
func learnHandlers(path string, e *fix.Engine, log *slog.Logger) func(*fix.Result) {
	return func(res *fix.Result) {
		for _, s := range res.Steps {
			if s.Note != "" || s.Op.Rule != plan.RuleMisplaced || s.Op.Kind != plan.Move ||
				!slices.ContainsFunc(s.Op.Pairs, func(p plan.Pair) bool { return nriplugin.LiteralMisplacement(p.Source) }) {
				continue // only a runtime-literal cgroup is cured by placing the cgroupsPath
			}
			p, ok := e.Meta.Pod(s.Op.Pod)
			if !ok || p.RuntimeHandler == "" {
				continue
			}
			if err := nriplugin.Learn(path, p.RuntimeHandler, time.Now()); err != nil {
				log.Warn("noting a runtime handler that misplaces containers", "handler", p.RuntimeHandler, "err", err)
			}
		}
	}
}

// bothApplied calls a then b (either may be nil).
func bothApplied(a, b func(*fix.Result)) func(*fix.Result) {
	return func(res *fix.Result) {
		for _, f := range []func(*fix.Result){a, b} {
			if f != nil {
				f(res)
			}
		}
	}
}

// parse checks --fix and --max-tier-cpu: the weight rules to hold,
// whether to adopt misplaced containers, and the tier's cap.
func (f *serveFix) parse() (weights []string, adopt bool, maxTier int64, err error) {
	for _, r := range f.rules {
		switch {
		case r == plan.RuleMisplaced:
			adopt = true
		case slices.Contains(plan.Rules, r):
			weights = append(weights, r)
		default:
			return nil, false, 0, fmt.Errorf("--fix %s: serve keeps fixed only %s", r, strings.Join(plan.Rules, ", "))
		}
	}
	if f.maxTierCPU != "" {
		m, err := metadata.Quantity(f.maxTierCPU)
		if err != nil || m <= 0 || m > metadata.MaxSizeMilliCPU {
			return nil, false, 0, fmt.Errorf("--max-tier-cpu %q: want a CPU quantity above 0 and at most %d CPUs", f.maxTierCPU, metadata.MaxSizeMilliCPU/1000)
		}
		maxTier = m
	}
	return weights, adopt, maxTier, nil
}

// run starts the fixers; the returned function stops them and waits.
func (fx *fixers) run(ctx context.Context, log *slog.Logger) (stop func()) {
	if fx == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if fx.holder != nil {
		wg.Go(func() {
			if err := fx.holder.Run(ctx); err != nil {
				log.Error("weight holder stopped", "err", err)
			}
		})
	}
	if fx.adopt != nil {
		wg.Go(func() { hold.RunAdoption(ctx, fx.adopt, fx.sizes, fx.interval, log, fx.adoptMetrics, fx.onAdopt) })
	}
	return func() { cancel(); wg.Wait() }
}

func (f *serveFix) flags(fl *pflag.FlagSet) {
	f.check = Duration(hold.DefaultCheck)
	fl.StringSliceVar(&f.rules, "fix", nil, "keep these rules fixed while serving (comma-separated: "+strings.Join(plan.Rules, ", ")+"; default none: observe only)")
	fl.StringVar(&f.journalDir, "journal-dir", journal.DefaultDir, "where the journal of applied changes (and its lock) lives")
	fl.StringVar(&f.maxTierCPU, "max-tier-cpu", "", "cap on the CPU sizes the BestEffort tier's weight counts (a CPU quantity; default: the node's CPUs)")
	fl.Var(&f.check, "size-check", "how often pod sizes are looked at for changes (with --fix)")
}

// noPods is the lister of a serve without a metadata source.
type noPods struct{}

func (noPods) Pods(context.Context) ([]metadata.Pod, error) { return nil, nil }

// restConfig is the API server's client configuration: --kubeconfig, else
// in-cluster; its transport wrapped by wrap when given (serve's
// apiconn.Reach).
func restConfig(kubeconfig string, wrap func(http.RoundTripper) http.RoundTripper) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err == nil && wrap != nil {
		rc.Wrap(wrap)
	}
	return rc, err
}

// serveEvents builds the notifier of --events: each new finding and each
// applied fix as an Event on its pod. nil when off.
func serveEvents(on bool, kubeconfig, node string, wrap func(http.RoundTripper) http.RoundTripper, log *slog.Logger) (*events.Notifier, func(), error) {
	if !on {
		return nil, func() {}, nil
	}
	rc, err := restConfig(kubeconfig, wrap)
	if err != nil {
		return nil, nil, fmt.Errorf("--events needs the API server (--kubeconfig, or in-cluster): %w", err)
	}
	return events.New(rc, node, log)
}

// appliedEvents turns an applied fix into Events (nil without a notifier).
func appliedEvents(note *events.Notifier) func(*fix.Result) {
	if note == nil {
		return nil
	}
	return func(res *fix.Result) {
		var steps []events.Step
		for _, s := range res.Steps {
			if s.Note == "" && s.Op.Pod != "" {
				steps = append(steps, events.Step{Pod: s.Op.Pod, Rule: s.Op.Rule, Description: s.Op.Description})
			}
		}
		note.Applied(steps)
	}
}

// findingsWithEvents counts findings for /metrics and, with a notifier,
// reports the new ones as Events: one audit per scan for both.
func findingsWithEvents(note *events.Notifier) func(*inventory.Node, *metadata.Set) []serve.FindingCount {
	if note == nil {
		return serve.AuditFindings
	}
	return func(n *inventory.Node, meta *metadata.Set) []serve.FindingCount {
		r := audit.Run(&audit.Input{Node: n, Meta: meta})
		note.Findings(n, r)
		return serve.CountFindings(r)
	}
}

// serveAuth builds the kubelet-like authentication of serve's data
// endpoints when asked, with HTTPS: the certificate files, else a
// self-signed certificate (and a warning). Without --authenticate, a
// listener beyond loopback gets a warning that anyone who reaches it can
// read the node's figures.
func serveAuth(on bool, kubeconfig, node, listen string, remote bool, tlsConfig *tls.Config, wrap func(http.RoundTripper) http.RoundTripper) (*serve.Auth, *tls.Config, error) {
	if !on {
		if remote {
			slog.Warn("serving beyond loopback without --authenticate: anyone who can reach " + listen + " reads this node's pod figures")
		}
		return nil, tlsConfig, nil
	}
	rc, err := restConfig(kubeconfig, wrap)
	if err != nil {
		return nil, nil, fmt.Errorf("--authenticate needs the API server (--kubeconfig, or in-cluster): %w", err)
	}
	rv, err := serve.NewAPIReviewer(rc)
	if err != nil {
		return nil, nil, err
	}
	if tlsConfig == nil {
		host, _, _ := net.SplitHostPort(listen)
		cert, err := serve.SelfSigned([]string{node, host, "127.0.0.1", "localhost"})
		if err != nil {
			return nil, nil, err
		}
		slog.Warn("--authenticate without --tls-cert-file: serving HTTPS with a self-signed certificate; clients must skip verification (metrics-server: --kubelet-insecure-tls)")
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return &serve.Auth{Reviewer: rv, Node: node, Log: slog.Default().With("component", "auth")}, tlsConfig, nil
}

// liveVMs watches the cluster's VM objects for --fix when pod metadata
// comes from the API server: NeonVM's live size then reaches the holder
// as it changes. nil otherwise (sizes from --vms, the runner's arguments
// and annotations).
func liveVMs(ctx context.Context, fixing bool, mode, kubeconfig string, wrap func(http.RoundTripper) http.RoundTripper, log *slog.Logger) *podsource.VMSource {
	if !fixing || (mode != podsource.Kubernetes && mode != podsource.Auto) {
		return nil
	}
	rc, err := restConfig(kubeconfig, wrap)
	if err != nil {
		return nil // no API server: nothing to watch
	}
	v, err := podsource.OpenVMs(ctx, rc, log)
	if err != nil {
		log.Warn("not watching VM objects", "err", err)
		return nil
	}
	return v
}
