package serve

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
)

func TestLoadTLS(t *testing.T) {
	if c, err := LoadTLS("", ""); c != nil || err != nil {
		t.Errorf("no files: %v, %v; want plain HTTP", c, err)
	}
	if _, err := LoadTLS("tls.crt", ""); err == nil {
		t.Error("a certificate without its key was accepted")
	}
	if _, err := LoadTLS("/nonexistent/tls.crt", "/nonexistent/tls.key"); err == nil {
		t.Error("missing files were accepted")
	}
}

func TestNodeName(t *testing.T) {
	t.Setenv("NODE_NAME", "from-env")
	if got := NodeName("given"); got != "given" {
		t.Errorf("given: %q", got)
	}
	if got := NodeName(""); got != "from-env" {
		t.Errorf("env: %q", got)
	}
	t.Setenv("NODE_NAME", "")
	host, _ := os.Hostname()
	if got := NodeName(""); got != host {
		t.Errorf("hostname: %q, want %q", got, host)
	}
}

// Start's stop returns only once the scan loop has ended.
func TestStartStop(t *testing.T) {
	clock := newFakeClock()
	smp := newSeedSampler(t)
	s := New(Config{Sampler: smp, Clock: clock})
	stop := s.Start(context.Background())
	stop()
	n := smp.scans.Load()
	if n > 1 || smp.scans.Load() != n {
		t.Errorf("%d scans after stop", n)
	}
}

// Every listener is opened before any serves: a --local-listen port in
// use fails the start (and releases the --listen port already taken).
func TestServeEndpointsPortInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freeAddr := free.Addr().String()
	free.Close()
	h := http.NotFoundHandler()
	err = ServeEndpoints(context.Background(), slog.Default(), Endpoint{Addr: freeAddr, Handler: h}, Endpoint{Addr: busy.Addr().String(), Handler: h})
	if err == nil {
		t.Fatal("a port in use did not fail the start")
	}
	again, err := net.Listen("tcp", freeAddr)
	if err != nil {
		t.Fatalf("the first endpoint's port was not released: %v", err)
	}
	again.Close()
}
