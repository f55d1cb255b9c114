package scale

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"

	"github.com/cgwarden/cgwarden/internal/apiconn"
	"github.com/cgwarden/cgwarden/internal/events"
	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/podsource"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/sizetrust"
)

// agent is the API-facing part of one node's `cgwarden serve --fix
// --metadata kubernetes --events`, wired as internal/agent's Complete wires
// it (completeLive, sizeTrust, liveVMs): the pod source (one informer on
// the node's pods), the live VM sizes, the size-trust checker and the
// Events recorder, read through hold.MetaSource every hold.DefaultCheck as
// the weight holder reads it. Nothing of the cgroup side runs: no scan, no
// holder, no writes; an idle agent has no new findings, so it sends no
// Events.
type agent struct {
	node string
	meta *hold.MetaSource
	// trust is its size-trust checker's verdict.
	trust func() metadata.Trust
	// sized counts MetaSource.Sizes calls that returned a set.
	sized atomic.Int64
	// lastErr is the last error of Sizes.
	lastErr atomic.Value
	stop    func()
}

// fleet is N agents in this process, each with its own connection to the
// API server.
type fleet struct {
	agents []*agent
	// reqs counts the agents' requests on the client side, by
	// "METHOD path" (names left out), watches apart.
	reqs *requestCounter
}

// startFleet starts one agent per node name, as ServiceAccount
// cgwarden-system/cgwarden (deploy/kustomize/base, and the size-trust role
// of deploy/kustomize/size-policy), workers at a time, and
// waits until every one has its pods listed.
func (e *env) startFleet(t *testing.T, nodes []string) *fleet {
	t.Helper()
	base := e.serviceAccountConfig(t, agentNamespace, agentSA)
	f := &fleet{agents: make([]*agent, len(nodes)), reqs: newRequestCounter()}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("CGWARDEN_SCALE_AGENT_LOG") != "" { // the agents' logs, for debugging
		log = slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	t.Cleanup(f.stop)
	t0 := time.Now()
	err := bulk(len(nodes), 16, func(i int) error {
		a, err := startAgent(base, nodes[i], f.reqs, log)
		if err != nil {
			return fmt.Errorf("agent of %s: %w", nodes[i], err)
		}
		f.agents[i] = a
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	poll.Every(500*time.Millisecond).Until(t, 3*time.Minute, fmt.Sprintf("%d agents sized their pods", len(nodes)), func() (bool, string, error) {
		n := 0
		for _, a := range f.agents {
			if a.sized.Load() > 0 {
				n++
			}
		}
		return n == len(nodes), fmt.Sprintf("%d of %d", n, len(nodes)), nil
	})
	t.Logf("%d agents started in %v", len(nodes), time.Since(t0).Round(time.Millisecond))
	return f
}

// stop ends every agent, waits for them and lets go of them (a stopped
// fleet holds nothing for the next one's heap figure to count).
func (f *fleet) stop() {
	var wg sync.WaitGroup
	for _, a := range f.agents {
		if a != nil {
			wg.Go(a.stop)
		}
	}
	wg.Wait()
	f.agents = nil
}

// ownConnection is base with a transport of its own: client-go shares one
// TLS transport (so one HTTP/2 connection) between every client of the
// same TLS configuration in a process, which would make N agents one
// connection. A dial function of its own gives the agent its own, as a
// node's agent process has; every client the agent builds from the result
// shares it, as they do in the agent.
func ownConnection(base *rest.Config, wrap func(http.RoundTripper) http.RoundTripper) (*rest.Config, error) {
	c := rest.CopyConfig(base)
	c.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	rt, err := rest.TransportFor(c)
	if err != nil {
		return nil, err
	}
	out := rest.CopyConfig(base)
	out.TLSClientConfig = rest.TLSClientConfig{}
	out.BearerToken, out.BearerTokenFile = "", ""
	out.Transport = rt
	out.Wrap(wrap)
	return out, nil
}

// startAgent starts the agent of node.
func startAgent(base *rest.Config, node string, reqs *requestCounter, log *slog.Logger) (*agent, error) {
	ctx, cancel := context.WithCancel(context.Background())
	var closes []func()
	fail := func(err error) (*agent, error) {
		cancel()
		for _, c := range closes {
			c()
		}
		return nil, err
	}
	log = log.With("node", node)
	reach := apiconn.NewReach(log, time.Now)
	rc, err := ownConnection(base, func(rt http.RoundTripper) http.RoundTripper { return reqs.wrap(reach.Wrap(rt)) })
	if err != nil {
		return fail(err)
	}
	// The node's pods (the agent's pod source with --metadata kubernetes:
	// one informer, field selector spec.nodeName) and the VM objects they
	// reference (its live VM sizes, agent.liveVMs).
	podClient, err := podsource.NewPodClient(rc)
	if err != nil {
		return fail(err)
	}
	vms, err := podsource.OpenVMWatches(ctx, rc, log)
	if err != nil {
		return fail(err)
	}
	closes = append(closes, vms.Close)
	pods, err := podsource.NewKubernetes(ctx, podClient, node, 2*time.Minute)
	if pods != nil {
		closes = append(closes, pods.Close)
	}
	if err != nil {
		return fail(err)
	}
	// Events (--events).
	_, stopEvents, err := events.New(rc, node, log)
	if err != nil {
		return fail(err)
	}
	closes = append(closes, stopEvents)
	// The size-trust checker (agent.sizeTrust).
	ch := &sizetrust.Checker{Node: node, Log: log.With("component", "sizetrust")}
	if dyn, err := sizetrust.NewClient(rc); err == nil {
		ch.API = dyn
	}
	ch.Start(ctx, 10*time.Second)
	// The metadata source (agent.completeLive).
	src := &hold.MetaSource{Lister: pods, Live: vms, Trust: ch.Trust}
	a := &agent{node: node, meta: src, trust: ch.Trust}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(hold.DefaultCheck)
		defer t.Stop()
		for {
			if _, err := src.Sizes(ctx); err != nil {
				a.lastErr.Store(err)
			} else {
				a.sized.Add(1)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	a.stop = func() {
		cancel()
		<-done
		for _, c := range closes {
			c()
		}
		// Its connection goes with it (a node's agent that exits closes
		// its socket).
		utilnet.CloseIdleConnectionsFor(rc.Transport)
	}
	return a, nil
}

// requestCounter counts requests by method and path shape.
type requestCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func newRequestCounter() *requestCounter { return &requestCounter{n: map[string]int{}} }

func (r *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		kind := req.Method + " " + pathShape(req.URL.Path)
		if req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1" {
			kind = "WATCH " + pathShape(req.URL.Path)
		}
		r.mu.Lock()
		r.n[kind]++
		r.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

// snapshot copies the counts.
func (r *requestCounter) snapshot() map[string]float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]float64{}
	for k, v := range r.n {
		out[k] = float64(v)
	}
	return out
}

// pathShape is an API path without namespace and object names:
// /api/v1/namespaces/x/pods → /api/v1/pods, /apis/g/v/namespaces/x/r/n → /apis/g/v/r.
func pathShape(p string) string {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	var keep []string
	i := 0
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		keep, i = parts[:2], 2
	case len(parts) >= 3 && parts[0] == "apis":
		keep, i = parts[:3], 3
	default:
		return p
	}
	if i+1 < len(parts) && parts[i] == "namespaces" && i+2 < len(parts) {
		i += 2
	}
	if i < len(parts) {
		keep = append(keep, parts[i])
		// a subresource (pods/x/resize)
		if i+2 < len(parts) {
			keep = append(keep, parts[i+2])
		}
	}
	return "/" + strings.Join(keep, "/")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// liveHeap is the heap the last full GC found live, after forcing two
// (runtime/metrics /gc/heap/live:bytes): what this process holds, not
// what it has yet to collect.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
