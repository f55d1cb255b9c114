package nriplugin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// runtimeSide is NRI's own runtime half (what containerd and CRI-O embed),
// in this process, listening on sock.
func runtimeSide(t *testing.T, sock string) *nri.Adaptation {
	t.Helper()
	sync := func(ctx context.Context, cb nri.SyncCB) error { _, err := cb(ctx, nil, nil); return err }
	update := func(context.Context, []*nri.ContainerUpdate) ([]*nri.ContainerUpdate, error) { return nil, nil }
	dir := t.TempDir()
	r, err := nri.New("containerd", "v2.4.2", sync, update, nri.WithSocketPath(sock),
		nri.WithPluginPath(filepath.Join(dir, "plugins")), nri.WithPluginConfigPath(filepath.Join(dir, "conf")))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	return r
}

// create asks the runtime side to create a container and returns the path
// the plugins set ("" for none).
func create(t *testing.T, r *nri.Adaptation, handler string) string {
	t.Helper()
	rpl, err := r.CreateContainer(context.Background(), &nri.CreateContainerRequest{Pod: pod(handler, slice), Container: ctr(literal)})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	return rpl.GetAdjust().GetLinux().GetCgroupsPath()
}

// waitPlaced creates spin containers until one is placed (the plugin has
// registered), or fails after timeout.
func waitPlaced(t *testing.T, r *nri.Adaptation, timeout time.Duration) string {
	t.Helper()
	var got string
	poll.Every(50*time.Millisecond).Until(t, timeout, "a placement (the plugin registered)", func() (bool, string, error) {
		got = create(t, r, "spin")
		return got != "", "not placed", nil
	})
	return got
}

// The plugin against NRI's real runtime side over its socket: started
// before the runtime (it retries until the socket answers), it registers,
// places a listed handler's container, leaves runc's alone, and serves its
// counts (every failure reason from the start).
func TestRunAgainstNRIRuntime(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nri.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	o := Options{Socket: sock, Handlers: []string{"spin"}, Listen: "127.0.0.1:0", Name: "cgwarden", Index: "50", Retry: 100 * time.Millisecond}
	addr := make(chan string, 1)
	log := slog.New(slog.NewTextHandler(&addrSniffer{found: addr}, nil))
	go func() { done <- Run(ctx, o, nil, log) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	time.Sleep(300 * time.Millisecond) // a few failed attempts first
	r := runtimeSide(t, sock)
	defer r.Stop()
	if got := waitPlaced(t, r, 10*time.Second); got != expanded {
		t.Fatalf("placed at %q, want %q", got, expanded)
	}
	if got := create(t, r, "runc"); got != "" {
		t.Errorf("runc's container got cgroupsPath %q; want it untouched", got)
	}
	body := get(t, "http://"+<-addr+"/metrics")
	// Every failure reason at 0 before any failure: the dashboard's rate
	// and the alert's increase have a series to read.
	for _, want := range []string{`cgwarden_nri_containers_total{handler="spin",result="placed"}`, "cgwarden_nri_connected 1", "cgwarden_nri_create_container_requests_total",
		`cgwarden_nri_failures_total{reason="cannot_place"} 0`, `cgwarden_nri_failures_total{reason="panic"} 0`, `cgwarden_nri_failures_total{reason="learned_file"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
}

// addrSniffer finds the metrics address in Run's log.
type addrSniffer struct{ found chan string }

func (a *addrSniffer) Write(p []byte) (int, error) {
	s := string(p)
	if strings.Contains(s, "serving /metrics") {
		if j := strings.Index(s, "addr="); j >= 0 {
			a.found <- strings.Fields(s[j+len("addr="):])[0]
		}
	}
	return len(p), nil
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestOptionsValidate(t *testing.T) {
	ok := Options{Socket: "/run/nri.sock", Handlers: []string{"spin"}, Index: "50"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	if o := (Options{Socket: "/run/nri.sock", DefaultHandler: true, Index: "50"}); o.Validate() != nil {
		t.Fatalf("the default handler alone: %v", o.Validate())
	}
	for _, c := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"relative socket", func(o *Options) { o.Socket = "nri.sock" }, "--socket"},
		{"bad handler", func(o *Options) { o.Handlers = []string{"Spin!"} }, "--runtime-handlers"},
		{"nothing to place", func(o *Options) { o.Handlers = nil }, "no runtime handler"},
		{"an empty handler is not the default's", func(o *Options) { o.Handlers = []string{""} }, "--runtime-handlers"},
		{"index", func(o *Options) { o.Index = "5" }, "--plugin-index"},
	} {
		o := ok
		c.edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// TestMetricsListenerLetsStalledClientsGo: a client that opens a
// connection to /metrics and sends half a request is disconnected once
// the header timeout passes (set short here), while a whole request is
// answered; without a header timeout the connection would stay open until
// the test's own deadline.
func TestMetricsListenerLetsStalledClientsGo(t *testing.T) {
	saved := metricsTimeouts
	t.Cleanup(func() { metricsTimeouts = saved })
	metricsTimeouts.ReadHeader = 200 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop, err := serveMetrics(t.Context(), addr, prometheus.NewRegistry(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	// Far beyond the header timeout: a server without one keeps waiting.
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the listener kept a stalled client's connection open for 20 s")
	}
}
