package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"

	"github.com/cgwarden/cgwarden/internal/answerproof"
	"github.com/cgwarden/cgwarden/internal/apiconn"
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
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/serve"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

// Agent is a completed configuration, ready to Run.
type Agent struct {
	cfg    *Config
	log    *slog.Logger
	Server *serve.Server
	// Loop is nil when serving a snapshot.
	Loop *Loop
	auth *serve.Auth
	// localAuth guards the loopback listener and minter signs its
	// answers (--local-listen with --authenticate; answerproof).
	localAuth *serve.Auth
	minter    answerproof.Minter
	tls       *tls.Config
	source    string
	note      *events.Notifier

	host *cgroupfs.Host
	// units is systemd's door when systemd runs the node (nil
	// otherwise): the fixers set the weights of its units through it.
	units  *systemd.Bus
	hub    *cgroupfs.Hub
	steady *inventory.Steady
	holder *hold.Holder
	adopt  *fix.Engine
	// journal is the one journal of the holder's and the adopter's
	// engines: its lock makes them wait for each other, not fail each
	// other's runs.
	journal *journal.Journal
	// adoptMetrics count the adopter's runs (with adopt).
	adoptMetrics *hold.AdoptionMetrics
	// refused says which misplaced cgroups the adopter refused (with
	// adopt).
	refused *refusals
	// adoptions hands the adopter the latest picture.
	adoptions chan *Picture
	app       *applier
	// fixing is whether the agent holds the node's locks (nodeLocks)
	// and so runs its fixers; served as cgwarden_agent_fix_lock.
	fixing atomic.Bool
	// abandoned is set when the shutdown gave up waiting for a goroutine
	// (StopWait): Close then leaves what it may still hold to the
	// process's exit.
	abandoned atomic.Bool
	closes    []func()
}

// Complete opens what the agent runs on: the API server's clients (auth,
// Events), the pod metadata source, and the live host with its one
// scanner and one inotify Hub (or the snapshot). Close (or Run) releases
// them.
func (c *Config) Complete(ctx context.Context) (_ *Agent, err error) {
	a := &Agent{cfg: c, log: c.Log, tls: c.TLS}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if err = a.completeAuth(); err != nil {
		return nil, err
	}
	if a.auth == nil && c.LocalListen != "" {
		a.log.Warn("--local-listen without --authenticate: any process on the node reads the node's audit and inventory on " + c.LocalListen)
	}
	scfg := serve.Config{NodeName: c.NodeName, Interval: c.Interval, Logger: a.log, Findings: true, Demand: c.Demand, NRIMetrics: c.NRIMetrics}
	if a.auth != nil {
		scfg.Collectors = append(scfg.Collectors, a.auth) // cgwarden_auth_*
	}
	// The host first: a node the agent cannot read fails at once, before
	// the sizes' first calls to the API server.
	var sc *inventory.Scanner
	if c.Snapshot == "" {
		if sc, err = a.openScanner(ctx, &scfg); err != nil {
			return nil, err
		}
	}
	m, err := c.OpenMeta(ctx)
	if err != nil {
		return nil, err
	}
	a.source, a.note = m.Source, m.Note
	a.closes = append(a.closes, m.Close)
	if c.Snapshot != "" {
		a.Server = serve.New(scfg)
		return a, c.Feed(ctx, a.Server, m.Lister)
	}
	if err = a.completeLive(m, sc, &scfg); err != nil {
		return nil, err
	}
	return a, nil
}

// completeLive wires the node loop over the scanner and m's sizes, and
// the fixers.
func (a *Agent) completeLive(m *Meta, sc *inventory.Scanner, scfg *serve.Config) error {
	c := a.cfg
	var err error
	src := m.Sizes
	scfg.Collectors = append(scfg.Collectors, m.collectors...)
	scfg.Collectors = append(scfg.Collectors, usageGauges(a.host)...)
	a.Loop = NewLoop(sc, src.Sizes, audit.Policy{MaxTierMilliCPU: c.MaxTierMilliCPU}, nil, c.Interval, c.Demand, a.log)
	a.app = newApplier()
	a.journal = journal.New(c.JournalDir)
	if len(c.Weights) > 0 {
		a.holder, err = hold.New(hold.Config{Host: a.host, Rules: c.Weights, MaxTierMilliCPU: c.MaxTierMilliCPU, Sizes: src.Sizes,
			Check: sizeCheck(c.SizeCheck, a.source, c.VMsFile, m.Notifying), Changed: m.Changes.C(), Resync: max(c.Interval, time.Second) * 6, Log: a.log, OnApply: a.applied, Engine: a.engine(),
			Loop: a.Loop, Watch: a.hub.Subscribe(), Apply: a.app.Do})
		if err != nil {
			return err
		}
		holder := a.holder
		a.Loop.Subscribe(func(p *Picture) { holder.Offer(p.Node, p.Meta) })
		scfg.Collectors = append(scfg.Collectors, a.holder)
	}
	if c.Adopt {
		a.adoptMetrics = hold.NewAdoptionMetrics() // every result at 0 from the first scrape
		a.refused = &refusals{log: a.log.With("component", "adopt")}
		scfg.Collectors = append(scfg.Collectors, a.adoptMetrics.Collectors()...)
		scfg.Collectors = append(scfg.Collectors, a.refused.gauge())
	}
	if c.fixing() {
		scfg.Collectors = append(scfg.Collectors, lockGauge(&a.fixing))
	}
	a.Server = serve.New(*scfg)
	a.Loop.srv = a.Server
	if a.note != nil {
		note := a.note
		a.Loop.Subscribe(func(p *Picture) { note.Findings(p.Node, p.Report) })
	}
	if c.Adopt {
		a.adopt = a.engine()
		a.adopt.Evidence = evidence(a.host, m.Lister)
		a.adoptions = make(chan *Picture, 1)
		// The adopter plans from the newest picture.
		a.Loop.Subscribe(func(p *Picture) { hold.OfferLatest(a.adoptions, p) })
	}
	return nil
}

// openScanner opens the host, systemd where the agent writes (weights,
// adoption), the one scanner, the Hub of cgroup events and, unless every
// scan is full, the steady scan that follows the Hub.
func (a *Agent) openScanner(ctx context.Context, scfg *serve.Config) (*inventory.Scanner, error) {
	c := a.cfg
	host, err := cgroupfs.OpenHost(c.HostRoot)
	if err != nil {
		return nil, err
	}
	a.host = host
	if len(c.Weights) > 0 || c.Adopt {
		b, why, err := systemd.OpenNode(ctx, c.HostRoot)
		if err != nil {
			a.log.Warn(err.Error())
		} else {
			a.log.Info(why)
		}
		if b != nil {
			a.units = b
			a.closes = append(a.closes, func() { _ = b.Close() })
		}
	}
	sc, err := inventory.Open(host)
	if err != nil {
		return nil, err
	}
	if c.Base != "" {
		sc.Base = c.Base
	}
	// Every consumer of the loop's pictures (serve, the audit, Events,
	// the adopter, the holder) is in this process and uses the process
	// counts of only a few cgroups: the rest are not read at every scan.
	sc.ProcsWhereUsed = true
	if !c.FullScans || len(c.Weights) > 0 {
		if a.hub, err = host.NewHub(); err != nil {
			return nil, err
		}
	}
	if !c.FullScans {
		if a.steady, err = inventory.NewSteady(sc, host, inventory.SteadyOptions{Watch: a.hub.Subscribe()}); err != nil {
			return nil, err
		}
		scfg.Collectors = append(scfg.Collectors, serve.SteadyCollector(a.steady))
	}
	return sc, nil
}

// engine is a fix engine of the agent: journaled applies through the host.
func (a *Agent) engine() *fix.Engine {
	e := &fix.Engine{FS: a.host, JournalDir: a.cfg.JournalDir, Journal: a.journal, Log: a.log.With("component", "fix"), By: journal.ByServe}
	if a.units != nil {
		e.Units = a.units
	}
	return e
}

// runAdoption repairs misplaced containers from each picture, on the
// applier, until ctx ends.
func (a *Agent) runAdoption(ctx context.Context) {
	log := a.log.With("component", "adopt")
	learn := learnHandlers(filepath.Join(a.cfg.JournalDir, nriplugin.LearnedFile), a.adopt, log)
	for {
		var p *Picture
		select {
		case <-ctx.Done():
			return
		case p = <-a.adoptions:
		}
		if a.idle(p) {
			a.adoptMetrics.Count(hold.AdoptClean, 0)
			a.refused.note(nil)
			continue
		}
		var res *fix.Result
		var err error
		a.app.Do(func() {
			a.adopt.Meta = p.Meta
			places := a.Loop.Places()
			res, err = a.adopt.ApplyScan(p.Node, places, fix.Options{Only: []string{rules.MisplacedContainer},
				RemoveEmptySource: places.V2 && !a.cfg.KeepEmptySource})
		})
		if res != nil && err == nil {
			a.refused.note(res.Plan)
		}
		switch {
		case err != nil:
			a.adoptMetrics.Count(hold.AdoptFailed, 0)
			log.Error("adopting misplaced containers", "err", err)
		case res.Run != "":
			moved := 0
			for _, s := range res.Steps {
				moved += len(s.Moved)
			}
			a.adoptMetrics.Count(hold.AdoptAdopted, moved)
			log.Info("adopted misplaced containers", "run", res.Run, "operations", len(res.Steps), "processes", moved)
			a.applied(res)
			learn(res)
		default:
			a.adoptMetrics.Count(hold.AdoptClean, 0)
		}
	}
}

// idle reports whether the adopter may skip picture p: nothing misplaced
// in it, and no run in the journal cut off that an apply would resume.
// Most scans are idle; skipping them spares the applier, the journal's
// locks and the plan (measured: part of fix mode's cost over observe-only
// at 60 idle pods). An unreadable journal is not idle: the apply says why.
func (a *Agent) idle(p *Picture) bool {
	if !plan.Idle(p.Node) {
		return false
	}
	unfinished, err := a.journal.HasUnfinished()
	return err == nil && !unfinished
}

// applied reports an applied fix as Events (when --events).
func (a *Agent) applied(res *fix.Result) {
	if a.note == nil {
		return
	}
	var steps []events.Step
	for _, s := range res.Steps {
		if s.Note == "" && s.Op.Pod != "" {
			steps = append(steps, events.Step{Pod: s.Op.Pod, Rule: s.Op.Rule, Description: s.Op.Description})
		}
	}
	a.note.Applied(steps)
}

// learnHandlers notes in the file at path (read by `cgwarden nri`) the
// CRI runtime handler of each pod whose misplaced container an adoption
// moved out of a runtime-literal "<slice>:<prefix>:<id>" cgroup (adoption
// moves only containers the metadata confirms): that handler's new
// containers can then be placed right before they start. Pods are looked
// up in the engine's metadata of the run (the
// CRI names handlers; other sources leave them unknown, and nothing is
// learned).
func learnHandlers(path string, e *fix.Engine, log *slog.Logger) func(*fix.Result) {
	return func(res *fix.Result) {
		for _, s := range res.Steps {
			if s.Note != "" || s.Op.Rule != rules.MisplacedContainer || s.Op.Kind != plan.Move ||
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

// completeAuth builds the kubelet-like authentication of the data
// endpoints when asked, with HTTPS: the certificate files, else a
// self-signed certificate (and a warning). Without --authenticate, a
// listener beyond loopback gets a warning that anyone who reaches it can
// read the node's figures.
func (a *Agent) completeAuth() error {
	c := a.cfg
	if !c.Authenticate {
		if c.AllowRemote {
			a.log.Warn("serving beyond loopback without --authenticate: anyone who can reach " + c.Listen + " reads this node's pod figures")
		}
		return nil
	}
	rc, err := apiconn.RESTConfig(c.Kubeconfig, c.WrapTransport)
	if err != nil {
		return fmt.Errorf("--authenticate needs the API server (--kubeconfig, or in-cluster): %w", err)
	}
	rv, err := serve.NewAPIReviewer(rc)
	if err != nil {
		return err
	}
	if a.tls == nil {
		host, _, _ := net.SplitHostPort(c.Listen)
		cert, err := serve.SelfSigned([]string{c.NodeName, host, "127.0.0.1", "localhost"})
		if err != nil {
			return err
		}
		a.log.Warn("--authenticate without --tls-cert-file: serving HTTPS with a self-signed certificate; clients must skip verification (metrics-server: --kubelet-insecure-tls)")
		a.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	a.auth = &serve.Auth{Reviewer: rv, Node: c.NodeName, Log: a.log.With("component", "auth")}
	if c.LocalListen != "" {
		return a.completeLocalAuth(rc, rv)
	}
	return nil
}

// completeLocalAuth guards the loopback listener as answerproof says:
// only tokens of the reader ServiceAccount, for its audience, bound to
// this node (no SubjectAccessReview: the API server authorised the user
// when it minted the token), and every answer signed by a token of this
// pod's ServiceAccount. Its reviews have slots and caches of their own.
func (a *Agent) completeLocalAuth(rc *rest.Config, rv serve.Reviewer) error {
	c := a.cfg
	minter, err := answerproof.NewAPIMinter(rc, c.Pod)
	if err != nil {
		return fmt.Errorf("--local-listen with --authenticate: %w", err)
	}
	reader := c.LocalReader
	if reader == "" {
		reader = answerproof.DefaultReader
	}
	user := answerproof.ServiceAccountUser(c.Pod.Namespace, reader)
	a.minter = minter
	a.localAuth = &serve.Auth{Reviewer: rv, Node: c.NodeName, Log: a.log.With("component", "auth", "listener", "local"),
		Audience: answerproof.ReaderAudience,
		Permit:   func(u authnv1.UserInfo) error { return answerproof.CheckReader(u, user, c.NodeName) }}
	a.log.Info("the loopback listener takes tokens of "+user+" bound to this node, and signs its answers", "pod", c.Pod.String(), "audience", answerproof.ReaderAudience)
	return nil
}

// Run runs the node loop and the fixers, and serves until ctx ends; then
// it stops them, waits for them and releases what Complete opened.
func (a *Agent) Run(ctx context.Context) error {
	defer a.Close()
	stop := a.Start(ctx)
	defer stop()
	return serve.ServeEndpoints(ctx, a.log, a.endpoints()...)
}

// Start runs the node loop, the holder, the adopter and the applier in
// the background; stop ends them and waits (the host can then be closed).
func (a *Agent) Start(ctx context.Context) (stop func()) {
	if a.Loop == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	appCtx, stopApp := context.WithCancel(context.Background())
	var wg, appWG sync.WaitGroup
	appWG.Go(func() { a.app.run(appCtx) })
	wg.Go(func() { a.Loop.Run(ctx) })
	if a.holder != nil || a.adopt != nil {
		wg.Go(func() { a.runFixers(ctx) })
	}
	return func() {
		cancel()
		if !waitAtMost(&wg, StopWait) {
			a.abandoned.Store(true)
			a.log.Error("the node loop or a fixer has not stopped "+StopWait.String()+" after the shutdown began (a read stuck in the kernel, an API call that ignores its context): exiting without it; the journal finishes any run it leaves (cgwarden revert)",
				"component", "agent")
		}
		// Every writer has stopped (or is stuck where it cannot write):
		// the applier can.
		stopApp()
		if !waitAtMost(&appWG, StopWait) {
			a.abandoned.Store(true)
			a.log.Error("the applier has not stopped "+StopWait.String()+" after the shutdown began: exiting without it", "component", "agent")
		}
	}
}

// StopWait bounds how long the agent's shutdown waits for its node loop,
// its fixers and its applier. A loop stuck in a read or a metadata call
// that ignores its context must not hold the process until the kubelet's
// SIGKILL a whole grace period later (30 s as shipped): the liveness
// probe that found it stuck asked for a restart, and a run cut short is
// what the journal is for (the kill-at-every-failpoint tests).
const StopWait = 5 * time.Second

// waitAtMost waits for wg for at most d; false when it gave up.
func waitAtMost(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// lockRetry is how often an agent waiting for the node's agent lock
// tries again.
const lockRetry = time.Second

// runFixers takes the node's locks (nodeLocks), waiting for as long as
// another agent holds them (serving meanwhile, /readyz and
// cgwarden_agent_fix_lock saying so), then runs the holder and the
// adopter until ctx ends, and lets the locks go after they stopped.
func (a *Agent) runFixers(ctx context.Context) {
	lock := a.waitForNode(ctx)
	if lock == nil {
		return
	}
	defer func() {
		a.fixing.Store(false)
		_ = lock.Release()
	}()
	var wg sync.WaitGroup
	if a.holder != nil {
		wg.Go(func() {
			if err := a.holder.Run(ctx); err != nil {
				a.log.Error("weight holder stopped", "err", err)
			}
		})
	}
	if a.adopt != nil {
		wg.Go(func() { a.runAdoption(ctx) })
	}
	wg.Wait()
}

// waitForNode takes the node's locks (nodeLocks), trying every lockRetry
// while another agent holds them; nil when ctx ended first. The wait is
// logged once, when it begins and when it ends.
func (a *Agent) waitForNode(ctx context.Context) *nodeLocks {
	log := a.log.With("component", "lock")
	if a.Loop.Latest() == nil {
		// The node lock is on the kubelet's root cgroup, which the first
		// scan finds.
		_, _, _ = a.Loop.Fresh(ctx)
	}
	var since time.Time
	for {
		// What the next agent will read of this one: since when it holds
		// the lock (written only when it takes it).
		who := fmt.Sprintf("pid %d (node %s), since %s", os.Getpid(), a.cfg.NodeName, time.Now().UTC().Format(time.RFC3339))
		lock, err := a.tryNodeLocks(who)
		switch {
		case err == nil:
			a.fixing.Store(true)
			if !since.IsZero() {
				a.Server.Standby("")
				log.Info("took the node's agent lock: fixing", "waited", time.Since(since).Round(time.Millisecond))
			}
			return lock
		case since.IsZero():
			since = time.Now()
			why := err.Error() + ": waiting for it; serving, not fixing"
			if !errors.Is(err, journal.ErrAgentLocked) {
				why = err.Error() + ": trying again every " + lockRetry.String() + "; serving, not fixing"
			}
			a.Server.Standby(why)
			log.Warn(why)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(lockRetry):
		}
	}
}

// endpoints are the listeners: --listen and, with --local-listen, the
// loopback one for kubectl cgwarden; both behind auth when given (one
// authenticator: one cache, one cap on reviews).
func (a *Agent) endpoints() []serve.Endpoint {
	c := a.cfg
	handler, local := a.Server.Handler(), a.Server.LocalHandler()
	if a.auth != nil {
		handler = a.auth.Wrap(handler)
	}
	if a.localAuth != nil {
		local = a.localAuth.Wrap(answerproof.Sign(local, a.minter, a.log.With("listener", "local")))
	}
	eps := []serve.Endpoint{{Addr: c.Listen, Handler: handler, TLS: a.tls, Wait: c.ListenWait, Attrs: []any{
		"node", c.NodeName, "metadata", a.source, "interval", c.Interval.String(), "snapshot", c.Snapshot}}}
	if c.LocalListen != "" {
		eps = append(eps, serve.Endpoint{Addr: c.LocalListen, Handler: local, Wait: c.ListenWait, Attrs: []any{"serves", "/audit, /inspect (kubectl cgwarden, through pods/portforward)", "authenticated", a.auth != nil}})
	}
	return eps
}

// Close releases what Complete opened (call after Start's stop).
func (a *Agent) Close() {
	if a.abandoned.Load() {
		// A stuck goroutine may hold the journal's lock or read through
		// the host's descriptors: closing them could block the exit the
		// shutdown bound is for. The process's exit releases them all.
		return
	}
	if a.steady != nil {
		a.steady.Close()
	}
	if a.hub != nil {
		a.hub.Close()
	}
	if a.host != nil {
		a.host.Close()
	}
	if a.journal != nil {
		a.journal.Close()
	}
	for _, f := range a.closes {
		f()
	}
}

// noPods is the lister of an agent without a metadata source.
type noPods struct{}

func (noPods) Pods(context.Context) ([]metadata.Pod, error) { return nil, nil }

// lockGauge serves whether the agent holds the node's agent lock.
func lockGauge(held *atomic.Bool) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cgwarden_agent_fix_lock",
		Help: "1 when this agent holds the node's agent lock and fixes; 0 while another agent on the node holds it and this one only serves."},
		func() float64 {
			if held.Load() {
				return 1
			}
			return 0
		})
}

// vmWatchGauges serve how many VM objects the agent watches, and how
// many it may not read.
func vmWatchGauges(v *podsource.VMWatches) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cgwarden_agent_vm_watches",
			Help: "VM objects (NeonVM VirtualMachines, KubeVirt VMIs) the agent watches, one list+watch on the API server each: those its node's pods reference, none other."},
			func() float64 { return float64(v.Watches()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cgwarden_agent_vm_reads_refused",
			Help: "VM objects that this node's pods reference and the API server refuses the agent (403: its identity may not read their namespace, the chart's metadata.vmNamespaces); their pods get no size from them."},
			func() float64 { return float64(v.Refused()) }),
	}
}

// usageGauges serve what the agent holds open on the host. Each reads
// the host's usage at each scrape: it takes a lock and counts the few
// caches and watchers open, no more.
func usageGauges(h hostUsage) []prometheus.Collector {
	gauge := func(name, help string, of func(cgroupfs.Usage) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(of(h.Usage())) })
	}
	return []prometheus.Collector{
		gauge("cgwarden_agent_scanners", "Steady-state scanners the agent keeps on the host (each keeps a cache of open descriptors): 1, whatever --fix asks.",
			func(u cgroupfs.Usage) int { return u.Caches }),
		gauge("cgwarden_agent_open_descriptors", "Cgroup file descriptors the agent's scanners keep open.",
			func(u cgroupfs.Usage) int { return u.Descriptors }),
		gauge("cgwarden_agent_inotify_instances", "inotify instances the agent holds: 1 (shared by the scan and the weight holder), 0 with --full-scans and no weight rule.",
			func(u cgroupfs.Usage) int { return u.Watchers }),
		gauge("cgwarden_agent_inotify_watches", "inotify watches the agent holds, over every consumer (a path watched by two is one watch).",
			func(u cgroupfs.Usage) int { return u.Watches }),
	}
}

// sizeCheck is how often the holder reads the pods' sizes on its own,
// between the scans the loop offers it (hold.Holder.Offer; each carries
// the sizes the loop read) and the changes its sources notify: given
// when the user gave it (--size-check); never when every source notifies
// (notifying: the Kubernetes source, whose informers for the pods, the VM
// objects, the size policy and the Node say when they change, and no VMs
// file); else hold.DefaultCheck (250 ms) where a size can change between
// scans and reading it is free (a pods or VMs file is a stat). With the
// CRI it is
// never (hold.NoCheck): listing the CRI is two gRPC calls that containerd
// answers with every sandbox's labels and annotations, 8 a second at
// 250 ms (measured in the lane: the fix-mode agent at 5× the observe-only
// one's CPU at 60 idle pods, and containerd paying more besides), and a
// second listing per interval still cost fix mode 1.2–1.5×; the sizes it
// gives change only with new pods (a sandbox's annotations are fixed at
// its creation), whose cgroups the holder sees appear at once and
// re-plans for with a fresh scan. Without a pod source and VMs file no
// size can change at all.
func sizeCheck(given time.Duration, source string, vmsFile string, notifying bool) time.Duration {
	switch {
	case given > 0:
		return given
	case notifying, source == podsource.CRI, source == podsource.None && vmsFile == "":
		return hold.NoCheck
	}
	return hold.DefaultCheck
}
