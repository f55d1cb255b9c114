package sizer

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/httpserver"
)

// Every timeout of the webhook's server is set, and each lets the API
// server's longest admission wait (30 s at most, timeoutSeconds) through
// while releasing what a slow or quiet client holds.
func TestHTTPServerTimeouts(t *testing.T) {
	srv := httpserver.New(http.NotFoundHandler(), webhookTimeouts, nil, slog.New(slog.DiscardHandler))
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout,
		"WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout,
	} {
		if d <= 0 || d > 2*time.Minute {
			t.Errorf("%s %v: want a bound above 0 and at most 2 min", name, d)
		}
	}
	if srv.ReadTimeout < srv.ReadHeaderTimeout {
		t.Errorf("ReadTimeout %v under ReadHeaderTimeout %v", srv.ReadTimeout, srv.ReadHeaderTimeout)
	}
	if srv.MaxHeaderBytes <= 0 || srv.MaxHeaderBytes > 1<<20 {
		t.Errorf("MaxHeaderBytes %d", srv.MaxHeaderBytes)
	}
}
