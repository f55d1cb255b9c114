package httpserver

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestQuietConnectionsAreReleased: a client that opens a connection and
// sends nothing, or keeps a connection alive after one scrape and goes
// quiet, does not hold it forever.
func TestQuietConnectionsAreReleased(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	short := Timeouts{ReadHeader: 200 * time.Millisecond, Read: 200 * time.Millisecond, Write: time.Second, Idle: 200 * time.Millisecond}
	hs := New(mux, short, nil, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })

	// closed waits for the server to close c; the deadline is only there
	// so a server that never does fails the test instead of hanging it.
	closed := func(what string, c net.Conn, r io.Reader) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.Copy(io.Discard, r); err != nil {
			t.Errorf("%s: the server kept the connection open: %v", what, err)
		}
	}

	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	closed("a connection that sends nothing", silent, silent)

	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("first request: %s, close %v; want 200 on a kept-alive connection", resp.Status, resp.Close)
	}
	closed("a kept-alive connection gone quiet", idle, br)
}

func TestZeroTimeoutsMeanTheDefaults(t *testing.T) {
	hs := New(http.NotFoundHandler(), Timeouts{}, nil, nil)
	got := Timeouts{ReadHeader: hs.ReadHeaderTimeout, Read: hs.ReadTimeout, Write: hs.WriteTimeout, Idle: hs.IdleTimeout}
	if got != Default || got.Idle <= 0 || got.Write <= 0 || got.Read <= 0 || got.ReadHeader <= 0 {
		t.Errorf("zero Timeouts gave %+v, want the (non-zero) defaults %+v", got, Default)
	}
}
