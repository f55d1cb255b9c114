package apiconn

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// clock is a hand-moved clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// answers is a transport whose next answer the test sets.
type answers struct {
	err  error
	code int
}

func (a *answers) RoundTrip(*http.Request) (*http.Response, error) {
	if a.err != nil {
		return nil, a.err
	}
	return &http.Response{StatusCode: a.code, Status: http.StatusText(a.code), Body: io.NopCloser(strings.NewReader(""))}, nil
}

func lines(b *bytes.Buffer) []string {
	s := strings.TrimSpace(b.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Many failed requests are one line; the first answer after them is one
// more, with how long the API server was away; a request its caller
// cancelled says nothing.
func TestReachLogsOncePerChange(t *testing.T) {
	var buf bytes.Buffer
	c := &clock{t: time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)}
	r := NewReach(slog.New(slog.NewTextHandler(&buf, nil)), c.now)
	a := &answers{code: 200}
	client := &http.Client{Transport: r.Wrap(a)}
	get := func(ctx context.Context) {
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://127.0.0.1:6443/api/v1/pods", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	get(context.Background())
	if got := lines(&buf); len(got) != 0 || r.Down() {
		t.Fatalf("an answer while up: %q, down %v", got, r.Down())
	}
	a.err = errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	for i := 0; i < 20; i++ {
		get(context.Background())
		c.t = c.t.Add(1500 * time.Millisecond)
	}
	a.err, a.code = nil, http.StatusServiceUnavailable
	get(context.Background())
	got := lines(&buf)
	if len(got) != 1 || !strings.Contains(got[0], "level=WARN") || !strings.Contains(got[0], "API server unreachable") || !strings.Contains(got[0], "connection refused") {
		t.Fatalf("21 failures: %q, want one warning naming the error", got)
	}
	if !r.Down() {
		t.Fatal("not down after failures")
	}
	// A request its caller cancelled is no answer.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a.code = 200
	get(ctx)
	if !r.Down() || len(lines(&buf)) != 1 {
		t.Fatalf("a cancelled request changed the state: down %v, %q", r.Down(), lines(&buf))
	}
	get(context.Background())
	get(context.Background())
	got = lines(&buf)
	if len(got) != 2 || !strings.Contains(got[1], "API server answers again") || !strings.Contains(got[1], "away=30s") || !strings.Contains(got[1], "failedRequests=21") {
		t.Fatalf("back: %q, want one line with away=30s failedRequests=21", got)
	}
	if r.Down() {
		t.Fatal("still down after an answer")
	}
}

// A message is written once per window, then again with the repeats
// folded; messages that differ (level, text, attributes) are not folded
// together; the error's text does not make a message new.
func TestFoldWritesAMessageOncePerWindow(t *testing.T) {
	var buf bytes.Buffer
	c := &clock{t: time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)}
	log := slog.New(NewFold(slog.NewTextHandler(&buf, nil), nil, time.Minute, c.now))
	for i := 0; i < 5; i++ {
		log.Error("Failed to watch", "type", "*v1.Pod", "err", errors.New("resourceVersion="+strings.Repeat("1", i+1)))
		c.t = c.t.Add(time.Second)
	}
	log.Error("Failed to watch", "type", "*unstructured.Unstructured", "err", errors.New("x"))
	log.Warn("Failed to watch", "type", "*v1.Pod")
	if got := lines(&buf); len(got) != 3 {
		t.Fatalf("within the window: %q, want 3 lines (pods once, VMs once, the warning once)", got)
	}
	c.t = c.t.Add(time.Minute)
	log.Error("Failed to watch", "type", "*v1.Pod", "err", errors.New("again"))
	got := lines(&buf)
	if len(got) != 4 || !strings.Contains(got[3], "repeatsFolded=4") {
		t.Fatalf("after the window: %q, want the message again with repeatsFolded=4", got)
	}
}

// While the API server is away client-go's lines are dropped (Reach said
// it), and counted in the line that says it is back.
func TestFoldDropsWhileAway(t *testing.T) {
	var buf bytes.Buffer
	c := &clock{t: time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)}
	r := NewReach(slog.New(slog.NewTextHandler(&buf, nil)), c.now)
	log := slog.New(NewFold(slog.NewTextHandler(&buf, nil), r, time.Minute, c.now))
	r.Failed(errors.New("connection refused"))
	log.Error("Unable to write event (may retry after sleeping)", "event", "a")
	log.Error("Failed to watch", "type", "*v1.Pod")
	r.Answered()
	got := lines(&buf)
	if len(got) != 2 || !strings.Contains(got[1], "clientLogLinesDropped=2") {
		t.Fatalf("%q, want the outage and the return only, the return counting 2 dropped lines", got)
	}
	log.Error("Failed to watch", "type", "*v1.Pod")
	if got := lines(&buf); len(got) != 3 {
		t.Fatalf("after the return a client-go line is written again: %q", got)
	}
}

// klog's lines reach the agent's log through RouteKlog, folded.
func TestRouteKlog(t *testing.T) {
	var buf bytes.Buffer
	RouteKlog(slog.New(slog.NewTextHandler(&buf, nil)), nil)
	defer klog.ClearLogger()
	for i := 0; i < 3; i++ {
		klog.ErrorS(errors.New("connection refused"), "Failed to watch", "type", "*v1.Pod")
	}
	got := lines(&buf)
	if len(got) != 1 || !strings.Contains(got[0], "component=client-go") || !strings.Contains(got[0], "Failed to watch") {
		t.Fatalf("%q, want one client-go line", got)
	}
}
