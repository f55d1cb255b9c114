package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	spdystream "k8s.io/apimachinery/pkg/util/httpstream/spdy"
	pfconst "k8s.io/apimachinery/pkg/util/portforward"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/transport/websocket"
	streamhttp "k8s.io/streaming/pkg/httpstream"
)

// tunnel is one port-forward session to a pod: each connection an HTTP
// client opens through it is a pair of streams (error, data) to the pod's
// port, as kubectl port-forward makes for each local connection, without
// a local listening port.
type tunnel struct {
	conn httpstream.Connection
	port int
	next atomic.Int64
}

// portForward is the Opener of the plugin: a port-forward session to each
// agent's pod, through the API server, with the user's credentials.
type portForward struct {
	cfg  *rest.Config
	core corev1client.CoreV1Interface
	port int
}

var _ Opener = portForward{}

// Open opens a port-forward to a's pod, by ctx's deadline.
func (p portForward) Open(ctx context.Context, a Agent) (Session, error) {
	u := p.core.RESTClient().Post().Resource("pods").Namespace(a.Namespace).Name(a.Pod).SubResource("portforward").URL()
	t, err := openTunnel(ctx, p.cfg, u, p.port)
	if err != nil {
		err = fmt.Errorf("port-forward to pod %s/%s: %w", a.Namespace, a.Pod, err)
		if strings.Contains(err.Error(), "forbidden") {
			err = fmt.Errorf("%w\n%s", err, rbacHint(a.Namespace))
		}
		return nil, err
	}
	return t, nil
}

// openTunnel starts a port-forward session to pod (through the API server,
// with cfg's credentials): over WebSockets first, as kubectl does since
// v1.31, falling back to SPDY when the API server cannot upgrade to them.
// It returns by ctx's deadline: the requests carry ctx (their TCP and TLS
// dials and the WebSocket handshake end with it), and the SPDY upgrade,
// whose answer client-go reads without a deadline, is waited for only
// until ctx ends; a session that opens after that is closed.
func openTunnel(ctx context.Context, cfg *rest.Config, podURL *url.URL, port int) (*tunnel, error) {
	conn, done, err := beforeDone(ctx, func() (httpstream.Connection, error) { return dialPortForward(ctx, cfg, podURL) })
	switch {
	case !done:
		return nil, fmt.Errorf("opening the session: %w", context.Cause(ctx))
	case err != nil && pastDeadline(ctx):
		// Ended by the deadline as it passed (the WebSocket dialer
		// sets it on the connection, whose i/o timeout can come
		// before ctx says it is done): say it is the deadline.
		return nil, fmt.Errorf("opening the session: %w (%v)", context.DeadlineExceeded, err)
	case err != nil:
		return nil, err
	}
	return &tunnel{conn: conn, port: port}, nil
}

// beforeDone runs f in a goroutine of its own and returns what it
// returns, done, unless ctx ends first: then done is false, and what f
// returns later is closed.
func beforeDone[T io.Closer](ctx context.Context, f func() (T, error)) (v T, done bool, err error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, true, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; any(r.v) != nil {
				_ = r.v.Close()
			}
		}()
		return v, false, nil
	}
}

// pastDeadline says ctx's deadline has passed, even if its timer has not
// fired yet.
func pastDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(dl)
}

// dialPortForward is portforward.NewFallbackDialer of a WebSocket and a
// SPDY dialer, as kubectl port-forward builds it, with ctx on the
// requests: client-go's dialers make their requests without a context
// (tunneling_dialer.go: "There is no passed context"), so this assembles
// the same exported pieces with one.
func dialPortForward(ctx context.Context, cfg *rest.Config, podURL *url.URL) (httpstream.Connection, error) {
	conn, err := dialWebSocket(ctx, cfg, podURL)
	if err == nil || !upgradeRefused(err) {
		return conn, err
	}
	return dialSPDY(ctx, cfg, podURL)
}

// upgradeRefused says the API server would not upgrade to WebSockets (or
// a proxy cannot carry them): kubectl's condition to fall back to SPDY.
// client-go's WebSocket round tripper returns k8s.io/streaming's
// UpgradeFailureError, which apimachinery's IsUpgradeFailure (what
// kubectl's fallback predicate reads) does not recognise since the two
// were split: both are asked.
func upgradeRefused(err error) bool {
	return streamhttp.IsUpgradeFailure(err) || httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
}

// dialWebSocket is portforward's tunnelingDialer.Dial: SPDY streams
// tunnelled in a WebSocket (GET, RBAC verb get on pods/portforward).
func dialWebSocket(ctx context.Context, cfg *rest.Config, podURL *url.URL) (httpstream.Connection, error) {
	rt, holder, err := websocket.RoundTripperFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, podURL.String(), nil)
	if err != nil {
		return nil, err
	}
	ws, err := websocket.Negotiate(rt, holder, req, pfconst.WebsocketsSPDYTunnelingPortForwardV1)
	if err != nil {
		return nil, err
	}
	return spdystream.NewClientConnectionWithPings(portforward.NewTunnelingConnection("client", ws), portforward.PingPeriod)
}

// dialSPDY is spdy's dialer: an upgrade to SPDY (POST, RBAC verb create
// on pods/portforward).
func dialSPDY(ctx context.Context, cfg *rest.Config, podURL *url.URL) (httpstream.Connection, error) {
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, podURL.String(), nil)
	if err != nil {
		return nil, err
	}
	conn, _, err := spdy.Negotiate(upgrader, &http.Client{Transport: rt}, req, portforward.PortForwardProtocolV1Name)
	return conn, err
}

// Close ends the session.
func (t *tunnel) Close() error { return t.conn.Close() }

// DialContext opens one connection to the pod's port (for an
// http.Transport; network and address are ignored), by ctx's deadline:
// opening a stream waits for the kubelet's reply (client-go waits up to
// 30 s); past ctx, the caller closes the session, which ends the wait.
func (t *tunnel) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	c, done, err := beforeDone(ctx, t.dial)
	if !done {
		return nil, fmt.Errorf("opening a stream to port %d: %w", t.port, context.Cause(ctx))
	}
	return c, err
}

// dial opens the pair of streams of one connection.
func (t *tunnel) dial() (net.Conn, error) {
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(t.port))
	h.Set(corev1.PortForwardRequestIDHeader, strconv.FormatInt(t.next.Add(1), 10))
	errStream, err := t.conn.CreateStream(h)
	if err != nil {
		return nil, fmt.Errorf("creating the error stream: %w", err)
	}
	errStream.Close() // nothing is written to it
	c := &streamConn{tunnel: t, errStream: errStream, remote: make(chan error, 1)}
	go func() {
		msg, err := io.ReadAll(errStream)
		switch {
		case err != nil:
			c.remote <- fmt.Errorf("reading the error stream: %w", err)
		case len(msg) > 0:
			// The kubelet's (or runtime's) word, e.g. nothing listens on
			// the port inside the pod.
			c.remote <- errors.New(string(msg))
		}
		close(c.remote)
	}()
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	if c.data, err = t.conn.CreateStream(h); err != nil {
		return nil, fmt.Errorf("creating the data stream: %w", err)
	}
	return c, nil
}

// streamConn is a data stream as a net.Conn. A read that ends early
// returns the error the other side sent on the error stream, if any.
type streamConn struct {
	tunnel    *tunnel
	data      httpstream.Stream
	errStream httpstream.Stream
	remote    chan error
	once      sync.Once
}

func (c *streamConn) Read(p []byte) (int, error) {
	n, err := c.data.Read(p)
	if err != nil {
		select {
		case rerr, ok := <-c.remote:
			if ok && rerr != nil {
				return n, rerr
			}
		case <-time.After(time.Second):
		}
	}
	return n, err
}

func (c *streamConn) Write(p []byte) (int, error) { return c.data.Write(p) }

func (c *streamConn) Close() error {
	c.once.Do(func() {
		_ = c.data.Close()
		_ = c.data.Reset()
		c.tunnel.conn.RemoveStreams(c.data, c.errStream)
	})
	return nil
}

type pfAddr struct{}

func (pfAddr) Network() string { return "portforward" }
func (pfAddr) String() string  { return "portforward" }

func (c *streamConn) LocalAddr() net.Addr              { return pfAddr{} }
func (c *streamConn) RemoteAddr() net.Addr             { return pfAddr{} }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }
