package agent_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/agent"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// TestSurgeAgentsShareTheirAddresses: two fixing agents of one node run
// as `serve` runs them (Run: the node loop, the fixers and the
// listeners) on the same --listen and --local-listen at once, as the old
// and the new pod of a DaemonSet update with maxSurge do on the host's
// network. Both start; connections to the shared address reach both
// (the first fixes, "ok"; the second stands by, "ok; standby: ..."); once
// the first stops, the second answers every connection. Before the
// listeners set SO_REUSEPORT the second's Run failed at once with
// "address already in use".
func TestSurgeAgentsShareTheirAddresses(t *testing.T) {
	s := realtest.NewScratch(t)
	tree := realtest.NewVMTree(s, 500, 1000)
	pods := &lister{}
	pods.set(tree.Pods())
	dir := t.TempDir()
	listen, local := freeAddr(t), freeAddr(t)
	run := func(name string) (stop func() error) {
		// A 1 s interval: /readyz fails when the last good scan is over 2
		// intervals old, and at 200 ms a scan delayed past 400 ms by the
		// host lane's other packages (their CPU burners) failed the 30
		// probes below once.
		o := &agent.Options{Listen: listen, LocalListen: local, Interval: time.Second, SizeCheck: 50 * time.Millisecond,
			Fix: []string{"size-blind-weights", "besteffort-starvation"}, JournalDir: dir,
			HostRoot: "/", Base: s.Name, Lister: pods, Log: slog.New(slog.DiscardHandler), TrustSizes: "default"}
		a := completeAgent(t, o)
		ctx, cancel := context.WithCancel(t.Context())
		var runErr error
		done := make(chan struct{})
		go func() { runErr = a.Run(ctx); close(done) }()
		stop = sync.OnceValue(func() error { cancel(); <-done; return runErr })
		t.Cleanup(func() { _ = stop() })
		// Run fails at once when it cannot listen.
		select {
		case <-done:
			t.Fatalf("the %s agent's Run on %s and %s: %v", name, listen, local, runErr)
		case <-time.After(500 * time.Millisecond):
		}
		return stop
	}
	stopOld := run("old")
	waitAnswer(t, listen, func(body string) bool { return body == "ok\n" }, "the old agent's /readyz: ok")
	run("new")

	// Each probe on a new connection, as the kubelet's: the kernel spreads
	// them over both listeners.
	seen := map[string]int{}
	poll.Every(10*time.Millisecond).Until(t, 20*time.Second, "/readyz on "+listen+" while both agents run: answers from the fixing and the standing-by agent", func() (bool, string, error) {
		code, body := get(t, listen, "/readyz")
		switch {
		case code == 200 && strings.Contains(body, "standby"):
			seen["standby"]++
		case code == 200:
			seen["fixing"]++
		default:
			seen[body]++
		}
		return seen["fixing"] > 0 && seen["standby"] > 0, fmt.Sprint(seen), nil
	})
	t.Logf("/readyz answers while both run: %v", seen)
	if code, _ := get(t, local, "/audit"); code != 200 {
		t.Errorf("--local-listen %s /audit: %d", local, code)
	}

	if err := stopOld(); err != nil {
		t.Errorf("the old agent's Run: %v", err)
	}
	// The new one takes the lock within a retry or two (lockRetry, 1 s),
	// and from then on every connection is its own.
	waitAnswer(t, listen, func(body string) bool { return body == "ok\n" }, "the new agent's /readyz after it took over: ok")
	for i := range 30 {
		if code, body := get(t, listen, "/readyz"); code != 200 || body != "ok\n" {
			t.Fatalf("/readyz %d after the old agent stopped: %d %q", i, code, body)
		}
	}
}

// freeAddr is a loopback address no one listens on (the kernel's pick,
// released).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// get asks addr for p on a new connection.
func get(t *testing.T, addr, p string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + p)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitAnswer waits until /readyz on addr answers 200 with a body ok
// accepts.
func waitAnswer(t *testing.T, addr string, ok func(string) bool, what string) {
	t.Helper()
	poll.Every(50*time.Millisecond).Until(t, 15*time.Second, what, func() (bool, string, error) {
		code, body := get(t, addr, "/readyz")
		return code == 200 && ok(body), fmt.Sprintf("%d %q", code, body), nil
	})
}
