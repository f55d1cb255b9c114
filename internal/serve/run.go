package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/cgwarden/cgwarden/internal/httpserver"
)

// LoadTLS loads the certificate and key of --tls-cert-file and
// --tls-private-key-file at start, so a bad pair fails the start rather
// than the first request. Neither given is plain HTTP (nil); one without
// the other is an error.
func LoadTLS(certFile, keyFile string) (*tls.Config, error) {
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	if certFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS key pair: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// NodeName is the node's name: given, else $NODE_NAME (the DaemonSet sets
// it from spec.nodeName), else the hostname.
func NodeName(given string) string {
	if given != "" {
		return given
	}
	if env := os.Getenv("NODE_NAME"); env != "" {
		return env
	}
	host, _ := os.Hostname()
	return host
}

// ShutdownGrace is how long in-flight requests get once serving stops.
const ShutdownGrace = 5 * time.Second

// Endpoint is one listener of the agent: an address, what is served
// there, and TLS (nil for plain HTTP). Attrs are logged with its
// "serving" line.
type Endpoint struct {
	Addr    string
	Handler http.Handler
	TLS     *tls.Config
	Attrs   []any
	// Wait is how long to keep trying while Addr is in use (0: fail at
	// once). See listen.
	Wait time.Duration
}

// ServeEndpoints listens on every endpoint first, so that a port in use
// fails the start, then serves them all until ctx is done (graceful
// shutdown) or one of them fails (the others are shut down too). The
// listeners are httpserver.Listen's (SO_REUSEPORT): during a DaemonSet
// update with maxSurge the new agent listens beside the old one on the
// host's network.
func ServeEndpoints(ctx context.Context, log *slog.Logger, eps ...Endpoint) error {
	lns := make([]net.Listener, 0, len(eps))
	for _, ep := range eps {
		ln, err := listen(ctx, log, ep)
		if err != nil || ln == nil {
			for _, l := range lns {
				l.Close()
			}
			return err // nil: ctx ended while waiting
		}
		lns = append(lns, ln)
	}
	errc := make(chan error, len(eps))
	servers := make([]*http.Server, len(eps))
	for i, ep := range eps {
		hs := httpserver.New(ep.Handler, httpserver.Default, ep.TLS, log)
		servers[i] = hs
		log.Info("serving", append([]any{"addr", lns[i].Addr().String(), "tls", ep.TLS != nil}, ep.Attrs...)...)
		go func(ln net.Listener, tlsOn bool) {
			if tlsOn {
				errc <- hs.ServeTLS(ln, "", "")
			} else {
				errc <- hs.Serve(ln)
			}
		}(lns[i], ep.TLS != nil)
	}
	var failed error
	select {
	case failed = <-errc:
	case <-ctx.Done():
		log.Info("shutting down")
	}
	return errors.Join(failed, shutdown(servers))
}

// listenRetry is how often listen tries an address in use again.
const listenRetry = time.Second

// listen opens ep's listener. While the address is in use it tries again
// every listenRetry for up to ep.Wait (logged once), and gives up with
// nil, nil when ctx ends first. The case it is for: a DaemonSet update
// with maxSurge from an agent of another user (observe-only runs as
// 64720, fix mode as root) — SO_REUSEPORT shares an address only among
// sockets of one effective UID, so the new agent cannot listen until the
// old one has gone; the old one goes once the new pod is Ready, which the
// kubelet's probes of the node's address (answered by the old agent
// meanwhile) make it.
func listen(ctx context.Context, log *slog.Logger, ep Endpoint) (net.Listener, error) {
	deadline := time.Now().Add(ep.Wait)
	var since time.Time
	for {
		ln, err := httpserver.Listen(ctx, ep.Addr)
		switch {
		case err == nil:
			if !since.IsZero() {
				log.Info("listening: the address is free", "addr", ep.Addr, "waited", time.Since(since).Round(time.Millisecond))
			}
			return ln, nil
		case !errors.Is(err, syscall.EADDRINUSE) || !time.Now().Before(deadline):
			return nil, err
		case since.IsZero():
			since = time.Now()
			log.Warn("the address is in use (the agent it replaces, running as another user?): trying again", "addr", ep.Addr, "every", listenRetry, "for", ep.Wait, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(listenRetry):
		}
	}
}

// shutdown gives in-flight requests ShutdownGrace on every server.
func shutdown(servers []*http.Server) error {
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	var errs []error
	for _, hs := range servers {
		if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
