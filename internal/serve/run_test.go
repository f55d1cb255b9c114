package serve

import (
	"context"
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
