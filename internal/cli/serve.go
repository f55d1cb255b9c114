package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/podsource"
	"github.com/cgwarden/cgwarden/internal/serve"
)

func newServe(o *Options) *cobra.Command {
	var (
		listen      string
		allowRemote bool
		interval    = Duration(serve.DefaultInterval)
		metaMode    string
		criSocket   string
		kubeconfig  string
		nodeName    string
		tlsCert     string
		tlsKey      string
		keep        serveFix
		authn       bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve pod and container CPU and memory from where the processes really are, in the kubelet's formats (/metrics/resource, /stats/summary) and as Prometheus metrics (/metrics)",
		Long: `serve scans the node's cgroups once per --interval and serves the latest scan:
  /metrics/resource  the kubelet's resource metrics (for metrics-server)
  /stats/summary     the kubelet's Summary API (CPU and memory)
  /metrics           cgwarden's own metrics
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
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := serve.CheckListen(listen, allowRemote); err != nil {
				return err
			}
			if interval <= 0 {
				return fmt.Errorf("--interval must be above 0")
			}
			if len(keep.rules) > 0 && o.Snapshot != "" {
				return fmt.Errorf("--fix changes the live node; it cannot be used with --snapshot")
			}
			var tlsConfig *tls.Config
			if (tlsCert == "") != (tlsKey == "") {
				return fmt.Errorf("--tls-cert-file and --tls-private-key-file go together")
			}
			if tlsCert != "" {
				// Load now, so a bad pair fails the start, not the first
				// request.
				cert, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
				if err != nil {
					return fmt.Errorf("TLS key pair: %w", err)
				}
				tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
			}
			if nodeName == "" {
				nodeName = os.Getenv("NODE_NAME")
			}
			if nodeName == "" {
				nodeName, _ = os.Hostname()
			}
			auth, tlsConfig, err := serveAuth(authn, kubeconfig, nodeName, listen, allowRemote, tlsConfig)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			log := slog.Default()

			if o.Snapshot != "" && metaMode == podsource.Auto {
				// A snapshot comes from another node: only a file can
				// name its pods.
				metaMode = podsource.None
				if o.PodsFile != "" {
					metaMode = podsource.File
				}
			}
			lister, source, err := podsource.Open(ctx, podsource.Config{
				Mode: metaMode, CRISocket: criSocket, HostRoot: o.HostRoot,
				Kubeconfig: kubeconfig, NodeName: nodeName, PodsFile: o.PodsFile,
			}, log)
			if err != nil {
				return err
			}
			cfg := serve.Config{NodeName: nodeName, Interval: time.Duration(interval), Logger: log, Findings: serve.AuditFindings}
			if lister != nil {
				cfg.Lister = lister
			}
			var srv *serve.Server
			if o.Snapshot != "" {
				srv = serve.New(cfg)
				if err := feedSnapshot(ctx, srv, o.Snapshot, lister); err != nil {
					return err
				}
			} else {
				host, err := cgroupfs.OpenHost(o.HostRoot)
				if err != nil {
					return err
				}
				defer host.Close()
				sc, err := inventory.Open(host)
				if err != nil {
					return err
				}
				cfg.Sampler = &serve.ScannerSampler{Scanner: sc}
				var ls hold.Lister
				if lister != nil {
					ls = lister
				}
				fx, err := keep.newFixers(host, ls, o.VMsFile, time.Duration(interval), log)
				if err != nil {
					return err
				}
				if fx != nil {
					cfg.Collectors = append(cfg.Collectors, fx.collectors...)
				}
				srv = serve.New(cfg)
				// The scan loop reads through host: stop it, and wait for
				// it, before host is closed (deferred above, so run after).
				runCtx, stopRun := context.WithCancel(ctx)
				running := make(chan struct{})
				go func() { defer close(running); srv.Run(runCtx) }()
				stopFix := fx.run(runCtx, log)
				defer func() { stopRun(); <-running; stopFix() }()
			}

			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			handler := srv.Handler()
			if auth != nil {
				handler = auth.Wrap(handler)
			}
			hs := serve.NewHTTPServer(handler, serve.DefaultTimeouts, tlsConfig, log)
			log.Info("serving", "addr", ln.Addr().String(), "tls", tlsConfig != nil, "node", nodeName, "metadata", source, "interval", time.Duration(interval).String(), "snapshot", o.Snapshot)
			errc := make(chan error, 1)
			go func() {
				if tlsConfig != nil {
					errc <- hs.ServeTLS(ln, "", "")
				} else {
					errc <- hs.Serve(ln)
				}
			}()
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
			}
			log.Info("shutting down")
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", serve.DefaultListen, "address to serve on; beyond loopback needs --allow-remote")
	f.BoolVar(&allowRemote, "allow-remote", false, "allow a --listen address reachable from other hosts (use --authenticate there, or a network policy)")
	f.Var(&interval, "interval", "time between two scans; every request reads the latest scan")
	f.StringVar(&metaMode, "metadata", podsource.Auto, "where pod and container names come from: "+strings.Join(podsource.Modes, ", ")+" (auto: --pods if given, else the CRI socket, else the Kubernetes API)")
	f.StringVar(&criSocket, "cri-socket", "", "CRI runtime socket (default: the first of "+strings.Join(podsource.DefaultCRISockets, ", ")+" that exists)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for the Kubernetes metadata source (default: in-cluster config)")
	f.StringVar(&nodeName, "node-name", "", "this node's name (default: $NODE_NAME, else the hostname)")
	f.StringVar(&tlsCert, "tls-cert-file", "", "serve HTTPS with this certificate (PEM), as metrics-server expects of a kubelet")
	f.StringVar(&tlsKey, "tls-private-key-file", "", "private key (PEM) of --tls-cert-file")
	f.BoolVar(&authn, "authenticate", false, "like the kubelet: serve HTTPS and accept only bearer tokens a TokenReview accepts and a SubjectAccessReview allows get on nodes/metrics (/metrics, /metrics/resource) or nodes/stats (/stats/summary); health endpoints stay open. Uses --kubeconfig or the in-cluster config")
	keep.flags(f)
	addVMs(f, o)
	return cmd
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
