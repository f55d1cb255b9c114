package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// How a simulated agent behaves.
type behaviour int

const (
	answers behaviour = iota
	silent            // accepts the connection, reads the request, never answers
	refuses           // nothing listens: connection refused
	stalls            // answers the headers and part of the body, then nothing
)

// fleet is n agents on loopback, each its own listener: real TCP, real
// HTTP servers, as many addresses as nodes.
type fleet struct {
	agents []Agent
	addr   map[string]string
	kind   map[string]behaviour

	silentAccepted, silentClosed atomic.Int64 // connections to silent agents, and those the client closed
	stallsGone                   atomic.Int64 // stalled answers whose client went away
}

func newFleet(t *testing.T, n int, kindOf func(i int) behaviour) *fleet {
	t.Helper()
	f := &fleet{addr: map[string]string{}, kind: map[string]behaviour{}}
	for i := range n {
		node := fmt.Sprintf("node-%03d", i)
		f.agents = append(f.agents, Agent{Node: node, Namespace: "cgwarden-system", Pod: "cgwarden-" + node})
		f.kind[node] = kindOf(i)
		switch kindOf(i) {
		case answers:
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "%s %s", node, r.URL.Path)
			}))
			t.Cleanup(srv.Close)
			f.addr[node] = srv.Listener.Addr().String()
		case stalls:
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "1000")
				w.WriteHeader(http.StatusOK)
				_, _ = io.WriteString(w, `{"node":`)
				w.(http.Flusher).Flush()
				<-r.Context().Done() // the client closed the connection
				f.stallsGone.Add(1)
			}))
			t.Cleanup(srv.Close)
			f.addr[node] = srv.Listener.Addr().String()
		case silent:
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			go f.holdSilently(l)
			f.addr[node] = l.Addr().String()
		case refuses:
			f.addr[node] = boundNotListening(t)
		}
	}
	return f
}

// boundNotListening is a loopback port that refuses connections and that
// no other listener can take while the test runs: a socket bound to it
// that never listens (a closed listener's port could be given to the
// next one).
func boundNotListening(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// holdSilently accepts connections and reads them to their end without
// ever writing: an agent whose node stopped answering.
func (f *fleet) holdSilently(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		f.silentAccepted.Add(1)
		go func() {
			_, _ = io.Copy(io.Discard, c)
			f.silentClosed.Add(1)
			c.Close()
		}()
	}
}

// counting is an Opener that counts the sessions open at once.
type counting struct {
	Opener
	open, most atomic.Int64
}

func (c *counting) Open(ctx context.Context, a Agent) (Session, error) {
	s, err := c.Opener.Open(ctx, a)
	if err != nil {
		return nil, err
	}
	n := c.open.Add(1)
	for {
		m := c.most.Load()
		if n <= m || c.most.CompareAndSwap(m, n) {
			break
		}
	}
	return &countedSession{Session: s, c: c}, nil
}

type countedSession struct {
	Session
	c    *counting
	once sync.Once
}

func (s *countedSession) Close() error {
	s.once.Do(func() { s.c.open.Add(-1) })
	return s.Session.Close()
}

// 200 agents on loopback: 5% accept and never answer, 5% refuse, 2.5%
// answer part of their report and stall. Every agent that answers is
// read, exactly, with its own answer; every silent or stalled one is
// reported as out of time (and its connection closed by the plugin, not
// left open), every refusing one as refused; never more than --parallel
// nodes at once. The answer does not depend on how fast the machine is:
// the deadline only decides which of the dead nodes' errors is reported.
func TestFetchAllBoundedFanOut(t *testing.T) {
	const n, parallel = 200, 8
	f := newFleet(t, n, func(i int) behaviour {
		switch {
		case i%20 == 3:
			return silent
		case i%20 == 7:
			return refuses
		case i%40 == 11:
			return stalls
		}
		return answers
	})
	op := &counting{Opener: Direct{Addr: func(a Agent) string { return f.addr[a.Node] }}}
	// 2 s per node: in the v2 lane's TCG guest, under load, an answering
	// agent on loopback took over 500 ms (169 of 200 answered in one CI
	// run); the dead nodes cost 2 s each, 8 at a time.
	results := FetchAll(context.Background(), f.agents, op, FetchOptions{Path: "/audit", Parallel: parallel, Timeout: 2 * time.Second, Port: 9531})

	if len(results) != n {
		t.Fatalf("%d results, want %d", len(results), n)
	}
	count := map[behaviour]int{}
	failed := 0
	for i, r := range results {
		if r.Agent != f.agents[i] {
			t.Fatalf("result %d is of %+v, want %+v (the agents' order)", i, r.Agent, f.agents[i])
		}
		k := f.kind[r.Node]
		count[k]++
		if r.Err != nil {
			failed++
		}
		var te *TimeoutError
		switch k {
		case answers:
			if want := r.Node + " /audit"; r.Err != nil || string(r.Body) != want {
				t.Errorf("%s answers: got %q, %v; want %q", r.Node, r.Body, r.Err, want)
			}
		case silent, stalls:
			if !errors.As(r.Err, &te) || !errors.Is(r.Err, context.DeadlineExceeded) || r.Body != nil {
				t.Errorf("%s (%d) does not answer: got %q, %v; want a TimeoutError", r.Node, k, r.Body, r.Err)
			}
		case refuses:
			if !errors.Is(r.Err, syscall.ECONNREFUSED) || errors.As(r.Err, &te) {
				t.Errorf("%s refuses: got %v; want connection refused", r.Node, r.Err)
			}
		}
	}
	if count[silent] != 10 || count[refuses] != 10 || count[stalls] != 5 {
		t.Fatalf("fleet %v", count)
	}
	if most := op.most.Load(); most > parallel || most < 1 {
		t.Errorf("%d sessions open at once, want 1 to %d", most, parallel)
	}
	if open := op.open.Load(); open != 0 {
		t.Errorf("%d sessions left open", open)
	}
	// Every connection to a dead agent was closed by the plugin when its
	// deadline passed (the servers see EOF); wait for their goroutines.
	deadline := time.Now().Add(20 * time.Second)
	for (f.silentClosed.Load() < f.silentAccepted.Load() || f.stallsGone.Load() < 5) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a, c := f.silentAccepted.Load(), f.silentClosed.Load(); a < 10 || c != a {
		t.Errorf("silent agents: %d connections accepted, %d closed by the plugin; want at least 10, all closed", a, c)
	}
	if g := f.stallsGone.Load(); g != 5 {
		t.Errorf("stalled agents: %d of 5 answers abandoned by the plugin", g)
	}
	want := "175 of 200 nodes answered; 15 gave no answer within --timeout, 10 failed otherwise (each named above)"
	if got := Summarize(results, failed); got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}

// An Opener that never opens (a port-forward the API server never
// upgrades) is bounded by the node's deadline like a read; cancelling the
// caller's context is not reported as the node's timeout.
func TestFetchAllOpenDeadlineAndCancel(t *testing.T) {
	agents := []Agent{{Node: "a"}, {Node: "b"}, {Node: "c"}}
	hang := openerFunc(func(ctx context.Context, a Agent) (Session, error) {
		<-ctx.Done()
		return nil, fmt.Errorf("port-forward to %s: %w", a.Node, context.Cause(ctx))
	})
	for _, r := range FetchAll(context.Background(), agents, hang, FetchOptions{Path: "/inspect", Parallel: 2, Timeout: 50 * time.Millisecond}) {
		var te *TimeoutError
		if !errors.As(r.Err, &te) || te.Timeout != 50*time.Millisecond || !strings.Contains(r.Err.Error(), "port-forward to "+r.Node) {
			t.Errorf("%s: %v, want a TimeoutError naming the port-forward", r.Node, r.Err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, r := range FetchAll(ctx, agents, hang, FetchOptions{Path: "/inspect", Parallel: 2, Timeout: time.Hour}) {
		var te *TimeoutError
		if !errors.Is(r.Err, context.Canceled) || errors.As(r.Err, &te) {
			t.Errorf("%s: %v, want context.Canceled and no TimeoutError", r.Node, r.Err)
		}
	}
}

type openerFunc func(ctx context.Context, a Agent) (Session, error)

func (f openerFunc) Open(ctx context.Context, a Agent) (Session, error) { return f(ctx, a) }
