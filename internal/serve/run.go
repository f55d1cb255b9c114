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
	"time"
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

// Start runs the scan loop (Run) in the background until the returned
// stop is called; stop waits for the loop to end, so what it reads
// through (the host) can be closed after.
func (s *Server) Start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	running := make(chan struct{})
	go func() { defer close(running); s.Run(ctx) }()
	return func() { cancel(); <-running }
}

// ShutdownGrace is how long in-flight requests get once serving stops.
const ShutdownGrace = 5 * time.Second

// ListenAndServe serves h on addr (HTTPS when tlsConfig is not nil) until
// ctx is done, then shuts down gracefully. attrs are logged with the
// "serving" line.
func ListenAndServe(ctx context.Context, addr string, h http.Handler, tlsConfig *tls.Config, log *slog.Logger, attrs ...any) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := NewHTTPServer(h, DefaultTimeouts, tlsConfig, log)
	log.Info("serving", append([]any{"addr", ln.Addr().String(), "tls", tlsConfig != nil}, attrs...)...)
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
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
