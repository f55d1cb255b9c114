package kubectlplugin

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// The port-forward's open is bounded by the node's deadline, against real
// loopback servers standing for an API server that does not answer:
// one that accepts the connection and never answers the WebSocket
// upgrade, and one that refuses WebSockets (so the plugin falls back to
// SPDY, as with an API server before v1.31) and never answers the SPDY
// upgrade, which client-go reads without a deadline. The port-forward
// through a real API server and kubelet is tested in the cluster lane
// (test/cluster TestKubectlPlugin).
func TestOpenTunnelDeadline(t *testing.T) {
	t.Run("no answer to the WebSocket upgrade", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close() // held open, never answered
			}
		}()
		openWithin(t, "http://"+l.Addr().String(), nil)
	})
	t.Run("WebSockets refused, no answer to the SPDY upgrade", func(t *testing.T) {
		var mu sync.Mutex
		var methods []string
		hold := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			methods = append(methods, r.Method)
			mu.Unlock()
			if r.Method == http.MethodGet {
				http.Error(w, "no websockets here", http.StatusBadRequest) // an upgrade failure: fall back
				return
			}
			<-hold // the SPDY upgrade is never answered
		}))
		defer srv.Close()
		defer close(hold)
		openWithin(t, srv.URL, func() {
			mu.Lock()
			defer mu.Unlock()
			if len(methods) != 2 || methods[0] != http.MethodGet || methods[1] != http.MethodPost {
				t.Errorf("the server saw %v, want GET (WebSockets) then POST (SPDY)", methods)
			}
		})
	})
}

// openWithin opens a tunnel to host with a short deadline and checks that
// it fails with the deadline, then runs check.
func openWithin(t *testing.T, host string, check func()) {
	t.Helper()
	u, err := url.Parse(host + "/api/v1/namespaces/cgwarden-system/pods/cgwarden-x/portforward")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	tun, err := openTunnel(ctx, &rest.Config{Host: host}, u, 9531)
	if err == nil {
		tun.Close()
		t.Fatal("a tunnel opened to a server that never answers")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the deadline", err)
	}
	if check != nil {
		check()
	}
}
