package httpserver

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"time"
)

// Timeouts bound what one client can hold of a server. Without them a
// client that opens keep-alive connections and goes quiet, or reads a
// response a byte a minute, keeps a goroutine and a file descriptor each
// for as long as it likes; a DaemonSet's file limit is reached that way.
type Timeouts struct {
	// ReadHeader bounds the request line and headers.
	ReadHeader time.Duration
	// Read bounds the whole request (headers and body).
	Read time.Duration
	// Write bounds the response: a scrape of a large node is a few MB.
	Write time.Duration
	// Idle bounds a keep-alive connection between two requests.
	Idle time.Duration
}

// Default is generous for any scraper on a node (Prometheus scrapes every
// 15-60 s and keeps its connection; metrics-server every 15 s or more)
// and still releases a quiet connection.
var Default = Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: 60 * time.Second, Idle: 2 * time.Minute}

// MaxHeaderBytes: no cgwarden endpoint takes more than a bearer token and
// one query parameter (an AdmissionReview comes in the body).
const MaxHeaderBytes = 64 << 10

// New is a server for h with t's timeouts (Default when t is zero), the
// header limit, net/http's own errors logged at warning level through log,
// and TLS when tlsConfig is not nil.
func New(h http.Handler, t Timeouts, tlsConfig *tls.Config, log *slog.Logger) *http.Server {
	if t == (Timeouts{}) {
		t = Default
	}
	if log == nil {
		log = slog.Default()
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		TLSConfig:         tlsConfig,
	}
}
