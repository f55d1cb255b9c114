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
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
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

// openTunnel starts a port-forward session to pod (through the API server,
// with cfg's credentials): over WebSockets first, as kubectl does since
// v1.31, falling back to SPDY when the API server cannot upgrade to them.
func openTunnel(cfg *rest.Config, podURL *url.URL, port int) (*tunnel, error) {
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, err
	}
	var dialer httpstream.Dialer = spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, podURL)
	ws, err := portforward.NewSPDYOverWebsocketDialer(podURL, cfg)
	if err != nil {
		return nil, err
	}
	dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	conn, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return nil, err
	}
	return &tunnel{conn: conn, port: port}, nil
}

// Close ends the session.
func (t *tunnel) Close() error { return t.conn.Close() }

// DialContext opens one connection to the pod's port (for an
// http.Transport; network and address are ignored).
func (t *tunnel) DialContext(_ context.Context, _, _ string) (net.Conn, error) {
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
