package apiconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Reach follows whether the API server answers.
type Reach struct {
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	down    bool
	since   time.Time
	failed  int // requests failed since it went away
	dropped int // client-go log lines dropped meanwhile
}

// NewReach logs to log; now is the clock (time.Now).
func NewReach(log *slog.Logger, now func() time.Time) *Reach {
	if log == nil {
		log = slog.Default()
	}
	return &Reach{log: log.With("component", "apiserver"), now: now}
}

// Wrap is a rest.Config WrapTransport: every request through the
// returned transport tells r whether the API server answered.
func (r *Reach) Wrap(rt http.RoundTripper) http.RoundTripper { return &tracked{rt: rt, r: r} }

type tracked struct {
	rt http.RoundTripper
	r  *Reach
}

func (t *tracked) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	switch {
	case errors.Is(req.Context().Err(), context.Canceled):
		// The caller gave up (the agent stopping, an informer restarting
		// its watch): that says nothing about the API server.
	case err != nil:
		t.r.Failed(err)
	case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
		t.r.Failed(fmt.Errorf("%s %s: %s", req.Method, req.URL.Path, resp.Status))
	default:
		t.r.Answered()
	}
	return resp, err
}

// Failed records a request the API server did not answer; the first one
// after it answered is logged.
func (r *Reach) Failed(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed++
	if r.down {
		return
	}
	r.down, r.since = true, r.now()
	r.log.Warn("API server unreachable: serving and fixing from the last pod list until it answers (said once; the next line says when it is back)", "err", err)
}

// Answered records an answer; the first one after a failure is logged.
func (r *Reach) Answered() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.down {
		return
	}
	r.log.Info("API server answers again", "away", r.now().Sub(r.since).Round(time.Second).String(),
		"failedRequests", r.failed, "clientLogLinesDropped", r.dropped)
	r.down, r.failed, r.dropped = false, 0, 0
}

// Down reports whether the API server is away now.
func (r *Reach) Down() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down
}

// drop counts a client-go log line dropped because the API server is
// away; false when it is not away (the line is to be written).
func (r *Reach) drop() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		r.dropped++
	}
	return r.down
}
