package kubectlplugin

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cgwarden/cgwarden/internal/answerproof"
)

// maxReport bounds what one agent may send (a node with thousands of
// containers is a few MB).
const maxReport = 64 << 20

// DefaultParallel is how many nodes are asked at once unless --parallel
// says otherwise: each is a port-forward, i.e. a stream the API server
// holds open to the node's kubelet for the time of one request.
const DefaultParallel = 8

// Opener opens a session to one agent, through which the requests to it
// go: a port-forward through the API server (portForward, tunnel.go), or a
// plain TCP connection (Direct) for tests and for simulated agents. Open
// is given the node's deadline in ctx and must return by it.
type Opener interface {
	Open(ctx context.Context, a Agent) (Session, error)
}

// Session carries connections to one agent's port. FetchAll closes it
// when the node's deadline passes, which must end any read or dial still
// under way in it.
type Session interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	Close() error
}

// FetchOptions say what to ask every agent, how many at once, and for how
// long.
type FetchOptions struct {
	Path string // /audit or /inspect
	// Prover gets each agent's reader token and checks its answer; nil
	// sends no token and checks nothing (the transport's own tests).
	Prover Prover
	// Parallel is how many nodes are asked at once (at least 1).
	Parallel int
	// Timeout bounds each node: the session's open (the port-forward's
	// dial and upgrade), the connection through it, the request and the
	// whole answer. A node still waiting for its turn is not timed.
	Timeout time.Duration
	// Port is the agent's port, named in errors (the Opener dials it).
	Port int
}

// Result is one node's report as its agent sent it, or why not.
type Result struct {
	Agent
	Body []byte
	Err  error
}

// TimeoutError is a node that did not answer within FetchOptions.Timeout
// (the node is reported, the others are not held up).
type TimeoutError struct {
	Timeout time.Duration
	Err     error
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("no answer within %s (--timeout): %v", e.Timeout, e.Err)
}

func (e *TimeoutError) Unwrap() error { return e.Err }

// FetchAll asks every agent for o.Path, o.Parallel at a time, each within
// o.Timeout, through sessions op opens, and returns the results in the
// agents' order. A node that fails or does not answer is one Result with
// its Err; it never stops the others. Cancelling ctx stops them all.
func FetchAll(ctx context.Context, agents []Agent, op Opener, o FetchOptions) []Result {
	out := make([]Result, len(agents))
	var g errgroup.Group // no error: each node's is its Result's
	g.SetLimit(max(1, o.Parallel))
	for i, a := range agents {
		g.Go(func() error {
			out[i] = fetchOne(ctx, op, a, o)
			return nil
		})
	}
	_ = g.Wait()
	return out
}

// fetchOne asks one agent, within o.Timeout.
func fetchOne(ctx context.Context, op Opener, a Agent, o FetchOptions) Result {
	nctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	body, err := fetch(nctx, op, a, o)
	if err != nil && ctx.Err() == nil && pastDeadline(nctx) {
		err = &TimeoutError{Timeout: o.Timeout, Err: err}
	}
	return Result{Agent: a, Body: body, Err: err}
}

// fetch GETs o.Path from one agent through a session of its own, with a
// reader token the API server minted for that agent and a fresh
// challenge, and returns the answer only if its answer token proves it
// came from the agent's pod (answerproof; with a Prover). The session is
// closed when ctx ends, so that nothing in it (a stream being opened, a
// read) outlives the node's deadline.
func fetch(ctx context.Context, op Opener, a Agent, o FetchOptions) ([]byte, error) {
	var token, challenge string
	if o.Prover != nil {
		var err error
		if token, err = o.Prover.ReaderToken(ctx, a); err != nil {
			return nil, err
		}
		if challenge, err = answerproof.NewChallenge(); err != nil {
			return nil, err
		}
	}
	s, err := op.Open(ctx, a)
	if err != nil {
		return nil, err
	}
	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = s.Close()
		close(closed)
	})
	defer func() {
		if stop() {
			_ = s.Close()
		} else {
			<-closed // the session is gone before the worker takes the next node
		}
	}()
	client := &http.Client{Transport: &http.Transport{DialContext: s.DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+o.Path, nil)
	if err != nil {
		return nil, err
	}
	// Asked for by hand, a gzipped answer is not decompressed by the
	// transport: its answer token is for the bytes sent, checked before
	// they are decompressed (decoded below).
	req.Header.Set("Accept-Encoding", "gzip")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(answerproof.ChallengeHeader, challenge)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s from pod %s/%s port %d (is the agent serving --local-listen on 127.0.0.1:%d?): %w", o.Path, a.Namespace, a.Pod, o.Port, o.Port, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReport+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s from pod %s/%s: reading the answer: %w", o.Path, a.Namespace, a.Pod, err)
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("GET %s from pod %s/%s: %s: %s", o.Path, a.Namespace, a.Pod, resp.Status, strings.TrimSpace(string(body)))
		if resp.StatusCode == http.StatusUnauthorized && token == "" {
			err = fmt.Errorf("%w\nthe agent checks tokens (serve --authenticate): this client sends none", err)
		}
		return nil, err
	}
	if len(body) > maxReport {
		return nil, fmt.Errorf("GET %s from pod %s/%s: the report is over %d MiB", o.Path, a.Namespace, a.Pod, maxReport>>20)
	}
	if o.Prover != nil {
		if err := o.Prover.Verify(ctx, a, challenge, req.URL.RequestURI(), body, resp.Header.Get(answerproof.AnswerHeader)); err != nil {
			return nil, &ImpostorError{Agent: a, Port: o.Port, Err: err}
		}
	}
	if resp.Header.Get("Content-Encoding") == "gzip" {
		if body, err = gunzip(body); err != nil {
			return nil, fmt.Errorf("GET %s from pod %s/%s: %w", o.Path, a.Namespace, a.Pod, err)
		}
	}
	return body, nil
}

// gunzip decompresses an answer, up to maxReport.
func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("the gzipped answer: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxReport+1))
	if err != nil {
		return nil, fmt.Errorf("the gzipped answer: %w", err)
	}
	if len(out) > maxReport {
		return nil, fmt.Errorf("the report is over %d MiB", maxReport>>20)
	}
	return out, nil
}

// ImpostorError is an answer that did not prove it came from the agent's
// pod: whatever answered on the port is not the agent (a process that
// took the port while the agent restarted, or shares it), and nothing it
// sent is shown.
type ImpostorError struct {
	Agent
	Port int
	Err  error
}

func (e *ImpostorError) Error() string {
	return fmt.Sprintf("the answer on port %d of pod %s/%s is not the agent's (%v): something else may be listening on 127.0.0.1:%d of node %s; nothing it sent is shown", e.Port, e.Namespace, e.Pod, e.Err, e.Port, e.Node)
}

func (e *ImpostorError) Unwrap() error { return e.Err }

// Direct is an Opener that dials each agent's address over TCP, without
// the API server: for tests and for simulated agents (the scale lane),
// which listen where Addr says. Its sessions hold no connection of their
// own; each request dials afresh.
type Direct struct {
	// Addr is the host:port of a's agent.
	Addr func(a Agent) string
}

var _ Opener = Direct{}

// Open returns a session that dials Addr(a).
func (d Direct) Open(_ context.Context, a Agent) (Session, error) {
	return directSession(d.Addr(a)), nil
}

type directSession string

func (s directSession) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, string(s))
}

func (directSession) Close() error { return nil }
