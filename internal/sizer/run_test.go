package sizer

import (
	"log/slog"
	"net/http"
	"strings"
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

// The leader election's timings are checked at start, naming the flags,
// for what client-go's NewLeaderElector refuses (RunOrDie would panic
// with them once the webhook already serves); the defaults, and timings
// just within client-go's rules, pass.
func TestCheckLeaderElection(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		lease, renew, retry time.Duration
		says                string // "" accepted
	}{
		{DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod, ""},
		{60 * s, 40 * s, 5 * s, ""},
		{3 * s, 2 * s, 1666 * time.Millisecond, ""}, // 1.2 × 1.666 s = 1.9992 s < 2 s
		{0, 10 * s, 2 * s, "must be above 0"},
		{15 * s, -1, 2 * s, "must be above 0"},
		{15 * s, 10 * s, 0, "must be above 0"},
		{10 * s, 10 * s, 2 * s, "--leader-elect-lease-duration (10s) must be longer than --leader-elect-renew-deadline (10s)"},
		{5 * s, 10 * s, 2 * s, "must be longer than --leader-elect-renew-deadline"},
		{15 * s, 12 * s, 10 * s, "--leader-elect-renew-deadline (12s) must be longer than 1.2 × --leader-elect-retry-period (10s), 12s"},
		{15 * s, 10 * s, 9 * s, "must be longer than 1.2 × --leader-elect-retry-period"},
	} {
		err := CheckLeaderElection(c.lease, c.renew, c.retry)
		switch {
		case c.says == "" && err != nil:
			t.Errorf("%v/%v/%v: %v, want accepted", c.lease, c.renew, c.retry, err)
		case c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says)):
			t.Errorf("%v/%v/%v: %v, want an error saying %q", c.lease, c.renew, c.retry, err, c.says)
		}
	}
}

// Options without timings (callers other than sizercmd) run with the
// defaults.
func TestLeaderElectionDefaults(t *testing.T) {
	lease, renew, retry := Options{}.leaderElection()
	if lease != DefaultLeaseDuration || renew != DefaultRenewDeadline || retry != DefaultRetryPeriod {
		t.Errorf("%v/%v/%v, want the defaults", lease, renew, retry)
	}
	if lease, _, _ = (Options{LeaseDuration: time.Minute}).leaderElection(); lease != time.Minute {
		t.Errorf("lease %v, want the one given", lease)
	}
}
