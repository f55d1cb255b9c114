package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"github.com/containerd/nri/pkg/stub"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cgwarden/cgwarden/internal/httpserver"
)

// DefaultSocket is where containerd and CRI-O put the NRI socket unless
// configured otherwise.
const DefaultSocket = "/var/run/nri/nri.sock"

// Options configure Run.
type Options struct {
	// Socket is the runtime's NRI socket.
	Socket string
	// Handlers are the runtime handlers whose containers are placed.
	Handlers []string
	// LearnedFile lists more handlers, learned by the agent ("": none).
	LearnedFile string
	// DefaultHandler places the containers of pods that name no runtime
	// handler too (the runtime's default, which containerd and CRI-O
	// report as ""): for a node whose default runtime is itself one that
	// takes systemd's slice:prefix:id literally, as k3s's --default-runtime
	// can make a wasm shim. Never on a node whose default is runc or crun:
	// they understand systemd's form and would refuse an absolute path.
	DefaultHandler bool
	// DryRun logs and counts what would be set, and sets nothing.
	DryRun bool
	// Listen serves /metrics and /healthz ("": not served).
	Listen string
	// Name and Index register the plugin with the runtime (NRI orders
	// plugins by index).
	Name, Index string
	// Retry is the wait before connecting again after the runtime closed
	// the connection or could not be reached.
	Retry time.Duration
	// LockDir, when set, is the directory whose flock the plugin holds
	// while it is registered: a second plugin on the node (a DaemonSet
	// update with maxSurge) waits for it instead of registering beside
	// it, where both would set the same cgroupsPath and the runtime would
	// refuse the container (lock.go).
	LockDir string
}

// Validate checks the options before anything runs.
func (o *Options) Validate() error {
	if o.Socket == "" || !filepath.IsAbs(o.Socket) {
		return fmt.Errorf("--socket %q: want the absolute path of the runtime's NRI socket", o.Socket)
	}
	for _, h := range o.Handlers {
		if err := ValidHandler(h); err != nil {
			return fmt.Errorf("--runtime-handlers: %w", err)
		}
	}
	if len(o.Handlers) == 0 && o.LearnedFile == "" && !o.DefaultHandler {
		return errors.New("no runtime handler to place: give --runtime-handlers, --learned-file or --default-handler")
	}
	if len(o.Index) != 2 || o.Index[0] < '0' || o.Index[0] > '9' || o.Index[1] < '0' || o.Index[1] > '9' {
		return fmt.Errorf("--plugin-index %q: want two digits", o.Index)
	}
	return nil
}

// Run registers the plugin with the runtime and serves its requests until
// ctx ends, connecting again whenever the runtime goes away (a restart of
// containerd closes the connection).
func Run(ctx context.Context, o Options, events Notifier, log *slog.Logger) error {
	if err := o.Validate(); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	fixed := slices.Clone(o.Handlers)
	if o.DefaultHandler {
		fixed = append(fixed, "") // the runtime's name for its default
	}
	handlers := NewHandlers(fixed, o.LearnedFile, func(err error) {
		m.Failures.WithLabelValues(FailLearned).Inc()
		log.Warn("learned handlers file unreadable: keeping the last good list", "err", err)
	})
	p := NewPlugin(handlers.Listed, o.DryRun, m, events, log)
	if o.Listen != "" {
		stop, err := serveMetrics(ctx, o.Listen, reg, m, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	if o.LockDir != "" {
		release := waitPluginLock(ctx, o.LockDir, min(o.Retry, lockRetry), log)
		if release == nil {
			return nil // ended while waiting
		}
		defer release()
	}
	log.Info("placing containers of runtime handlers", "handlers", o.Handlers, "defaultHandler", o.DefaultHandler, "learnedFile", o.LearnedFile, "socket", o.Socket, "dryRun", o.DryRun)
	return connectLoop(ctx, o, p, m, log)
}

// connectLoop runs one stub per connection. A failure to connect is logged
// when it first happens and when it ends, not at every retry.
func connectLoop(ctx context.Context, o Options, p *Plugin, m *Metrics, log *slog.Logger) error {
	failing := false
	for {
		s, err := stub.New(p, stub.WithPluginName(o.Name), stub.WithPluginIdx(o.Index), stub.WithSocketPath(o.Socket),
			stub.WithLogger(nriLogger{log.With("component", "nri-stub")}))
		if err != nil {
			return fmt.Errorf("NRI stub: %w", err)
		}
		err = s.Start(ctx)
		if err == nil {
			if failing {
				log.Info("connected to the runtime again")
			}
			failing = false
			m.Connected.Set(1)
			waitClosed(ctx, s)
			m.Connected.Set(0)
			if ctx.Err() == nil {
				log.Warn("the runtime closed the NRI connection: containers are created unplaced until it is back; connecting again", "retry", o.Retry)
			}
		} else if !failing && ctx.Err() == nil {
			failing = true
			log.Warn("cannot register with the runtime's NRI socket: retrying", "socket", o.Socket, "err", err, "retry", o.Retry)
		}
		s.Stop()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.Retry):
		}
	}
}

// waitClosed returns when the runtime closed the connection, or ctx ended
// (then it closes it).
func waitClosed(ctx context.Context, s stub.Stub) {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			s.Stop()
		case <-done:
		}
	}()
	s.Wait()
}

// metricsTimeouts bound each request to /metrics and /healthz: the
// agent's own (httpserver.Default); a client that stalls mid-request must
// not hold a connection forever.
var metricsTimeouts = httpserver.Default

// serveMetrics serves /metrics and /healthz on addr until stop. The
// listener is httpserver.Listen's (SO_REUSEPORT): the plugin runs in the
// agent's pod on the host's network, and during a DaemonSet update with
// maxSurge the new pod's plugin listens beside the old one's.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, m *Metrics, log *slog.Logger) (stop func(), err error) {
	ln, err := httpserver.Listen(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	srv := httpserver.New(mux, metricsTimeouts, nil, log)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	log.Info("serving /metrics and /healthz", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// nriLogger sends the NRI stub's log lines to slog.
type nriLogger struct{ l *slog.Logger }

func (n nriLogger) Debugf(ctx context.Context, f string, a ...any) {
	n.l.DebugContext(ctx, fmt.Sprintf(f, a...))
}

// Infof goes to debug: the stub says "Created plugin" and "Stopping
// plugin" at every connection attempt, and Run logs what matters.
func (n nriLogger) Infof(ctx context.Context, f string, a ...any) {
	n.l.DebugContext(ctx, fmt.Sprintf(f, a...))
}
func (n nriLogger) Warnf(ctx context.Context, f string, a ...any) {
	n.l.WarnContext(ctx, fmt.Sprintf(f, a...))
}
func (n nriLogger) Errorf(ctx context.Context, f string, a ...any) {
	n.l.ErrorContext(ctx, fmt.Sprintf(f, a...))
}
