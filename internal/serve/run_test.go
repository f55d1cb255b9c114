package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/poll"
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

// TestListenWaitsForTheAddress: with Endpoint.Wait, an address in use
// (here by a listener without SO_REUSEPORT, as the old agent of another
// user holds it for the kernel) is tried again until it is free, then
// served; without Wait it fails the start at once; ended while waiting,
// ServeEndpoints returns nil.
func TestListenWaitsForTheAddress(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := busy.Addr().String()
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("new\n")) })
	if err := ServeEndpoints(t.Context(), slog.New(slog.DiscardHandler), Endpoint{Addr: addr, Handler: h}); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("without Wait: %v, want EADDRINUSE at once", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- ServeEndpoints(ctx, slog.New(slog.DiscardHandler), Endpoint{Addr: addr, Handler: h, Wait: 30 * time.Second})
	}()
	time.Sleep(1500 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("ServeEndpoints returned while the address was in use: %v", err)
	default:
	}
	busy.Close() // the old agent goes
	poll.Every(100*time.Millisecond).Until(t, 5*time.Second, "serving once the address was freed", func() (bool, string, error) {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			return false, err.Error(), nil
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "new\n" {
			return false, "", fmt.Errorf("answered %q", b)
		}
		return true, "", nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ServeEndpoints after ctx ended: %v", err)
	}

	// Ended while still waiting: nil, not an error.
	again, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	ctx, cancel = context.WithCancel(t.Context())
	go func() {
		done <- ServeEndpoints(ctx, slog.New(slog.DiscardHandler), Endpoint{Addr: addr, Handler: h, Wait: 30 * time.Second})
	}()
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ended while waiting: %v, want nil", err)
	}
}
