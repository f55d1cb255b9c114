package httpserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// serveAs serves "<name>\n" on ln through New, as the agent's servers are
// made; stop closes it.
func serveAs(t *testing.T, name string, ln net.Listener) (stop func()) {
	t.Helper()
	hs := New(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, name) }), Timeouts{}, nil, nil)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return func() { hs.Close() }
}

// ask sends one request on a new connection (as a scraper or the
// kubelet's probe does after the server closed its last one) and returns
// which server answered.
func ask(t *testing.T, addr string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("GET %s: %v", addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTwoServersShareAnAddress: the old and the new agent of a maxSurge
// update listen on one address at once, both answer, and once the old
// one stops the new one answers every connection.
func TestTwoServersShareAnAddress(t *testing.T) {
	old, err := Listen(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := old.Addr().String()
	stopOld := serveAs(t, "old", old)
	surge, err := Listen(t.Context(), addr)
	if err != nil {
		t.Fatalf("the second listener on %s: %v", addr, err)
	}
	serveAs(t, "new", surge)

	seen := map[string]int{}
	for i := 0; i < 200 && (seen["old\n"] == 0 || seen["new\n"] == 0); i++ {
		seen[ask(t, addr)]++
	}
	if seen["old\n"] == 0 || seen["new\n"] == 0 {
		t.Fatalf("answers on %s while both listen: %v; want both servers", addr, seen)
	}
	t.Logf("answers while both listen: %v", seen)

	stopOld()
	for i := range 50 {
		if got := ask(t, addr); got != "new\n" {
			t.Fatalf("request %d after the old server closed: answered by %q", i, got)
		}
	}
}

// TestTheAddressIsNotSharedWithoutTheOption: a listener made without
// SO_REUSEPORT (net.Listen, as before) keeps the address to itself, and
// a second one without it is refused too — what stopped the surge pod.
func TestTheAddressIsNotSharedWithoutTheOption(t *testing.T) {
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if ln, err := Listen(t.Context(), plain.Addr().String()); !errors.Is(err, syscall.EADDRINUSE) {
		if ln != nil {
			ln.Close()
		}
		t.Errorf("Listen beside a plain listener: %v, want EADDRINUSE", err)
	}

	shared, err := Listen(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	if ln, err := net.Listen("tcp", shared.Addr().String()); !errors.Is(err, syscall.EADDRINUSE) {
		if ln != nil {
			ln.Close()
		}
		t.Errorf("a plain listener beside Listen's: %v, want EADDRINUSE", err)
	}
}
