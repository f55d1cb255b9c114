package serve

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// Health thresholds, in scan intervals.
const (
	// livenessIntervals: /healthz fails when the scan loop has completed
	// no scan (good or failed) for this many intervals: the loop is stuck
	// (a read blocked in the kernel, a deadlock) and only a restart helps.
	livenessIntervals = 3
	// readinessIntervals: /readyz fails when the last good scan is older
	// than this many intervals: what is served is stale.
	readinessIntervals = 2
)

// health is what the probes read: times from the scan loop's clock, as
// Unix nanoseconds (0: never).
type health struct {
	// loop is when the scan loop started or last completed a scan, good
	// or failed; 0 when no loop runs (a snapshot is served).
	loop atomic.Int64
	// good is when the last good scan completed.
	good atomic.Int64
	// standby, when set, is why the agent serves but does not fix (it
	// waits for another agent's lock): /readyz says so and stays 200.
	standby atomic.Pointer[string]
}

// Standby records why the agent serves without fixing ("" when it
// fixes): /readyz answers 200 with it. Readiness itself does not fail: a
// DaemonSet update with maxSurge retires the old agent (and frees the
// lock the new one waits for) only once the new one is Ready.
func (s *Server) Standby(why string) {
	if why == "" {
		s.probes.standby.Store(nil)
		return
	}
	s.probes.standby.Store(&why)
}

func stamp(t time.Time) int64 { return t.UnixNano() }

// live says why the scan loop is stuck, or "" when it is not (or does
// not run: a snapshot served never goes stale).
func (s *Server) live(now time.Time) string {
	loop := s.probes.loop.Load()
	if loop == 0 {
		return ""
	}
	limit := livenessIntervals * s.cfg.Interval
	if age := now.Sub(time.Unix(0, loop)); age > limit {
		return fmt.Sprintf("the scan loop has completed no scan for %s (over %d intervals of %s)", age.Round(time.Second), livenessIntervals, s.cfg.Interval)
	}
	return ""
}

// ready says why what is served is not fit to serve, or "" when it is.
func (s *Server) ready(now time.Time) string {
	if !s.Ready() {
		return "no scan completed yet"
	}
	if s.probes.loop.Load() == 0 {
		return "" // a snapshot, fed once
	}
	good := s.probes.good.Load()
	if good == 0 {
		return "no scan completed yet"
	}
	limit := readinessIntervals * s.cfg.Interval
	if age := now.Sub(time.Unix(0, good)); age > limit {
		// Whole seconds said "0s old" of a 450 ms age over a 400 ms limit.
		unit := time.Second
		if age < 10*time.Second {
			unit = 10 * time.Millisecond
		}
		return fmt.Sprintf("the last good scan is %s old (over %d intervals of %s)", age.Round(unit), readinessIntervals, s.cfg.Interval)
	}
	return ""
}

func (s *Server) health(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if why := s.live(s.cfg.Clock.Now()); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := s.ready(s.cfg.Clock.Now()); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		if why := s.probes.standby.Load(); why != nil {
			fmt.Fprintf(w, "ok; standby: %s\n", *why)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}
