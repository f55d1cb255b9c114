package scale

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	agentpkg "github.com/cgwarden/cgwarden/internal/agent"
	"github.com/cgwarden/cgwarden/internal/apiconn"
	"github.com/cgwarden/cgwarden/internal/podsource"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/serve"
)

// agent is the API-facing half of one node's `cgwarden serve --fix
// --metadata kubernetes --events` (deploy/kustomize/fix): the agent's own
// agent.Meta, opened by agent.Config.OpenMeta as Complete opens it (the
// pod source, one informer on the node's pods; the live VM sizes; the
// size-trust checker; the Events recorder). Its sizes are read as the
// agent reads them: at each scan (every serve.DefaultInterval, the node
// loop's metadata) and whenever a source of the sizes notifies a change
// (the holder). Nothing of the cgroup side runs: no scan, no holder, no
// writes; an idle agent has no new findings, so it sends no Events.
type agent struct {
	node string
	meta *agentpkg.Meta
	// sized counts Sizes calls that returned a set.
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
	kubeconfig, err := writeKubeconfig(t.TempDir(), base)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{agents: make([]*agent, len(nodes)), reqs: newRequestCounter()}
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("CGWARDEN_SCALE_AGENT_LOG") != "" { // the agents' logs, for debugging
		log = slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	t.Cleanup(f.stop)
	t0 := time.Now()
	err = bulk(len(nodes), 16, func(i int) error {
		a, err := startAgent(base, kubeconfig, nodes[i], f.reqs, log)
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

// writeKubeconfig writes the agents' kubeconfig: base's server, CA and
// token, as a node's agent reads its ServiceAccount's.
func writeKubeconfig(dir string, base *rest.Config) (string, error) {
	ca := base.CAData
	if len(ca) == 0 && base.CAFile != "" {
		b, err := os.ReadFile(base.CAFile)
		if err != nil {
			return "", err
		}
		ca = b
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lane"] = &clientcmdapi.Cluster{Server: base.Host, CertificateAuthorityData: ca}
	kc.AuthInfos["agent"] = &clientcmdapi.AuthInfo{Token: base.BearerToken}
	kc.Contexts["agent"] = &clientcmdapi.Context{Cluster: "lane", AuthInfo: "agent"}
	kc.CurrentContext = "agent"
	name := filepath.Join(dir, "agent.kubeconfig")
	return name, clientcmd.WriteToFile(*kc, name)
}

// ownConnection is a transport of the agent's own to base's server:
// client-go shares one TLS transport (so one HTTP/2 connection) between
// every client of the same TLS configuration in a process, which would
// make N agents one connection. A dial function of its own gives the
// agent its own, as a node's agent process has. It carries no
// credential: the agent's clients add their own around it.
func ownConnection(base *rest.Config) (http.RoundTripper, error) {
	c := rest.AnonymousClientConfig(base)
	c.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return rest.TransportFor(c)
}

// startAgent opens the agent of node: agent.Config.OpenMeta with the
// options of deploy/kustomize/fix, every client of it on one connection
// of its own, counted by reqs (its WrapTransport, where the command puts
// an apiconn.Reach's, which it keeps).
func startAgent(base *rest.Config, kubeconfig, node string, reqs *requestCounter, log *slog.Logger) (*agent, error) {
	own, err := ownConnection(base)
	if err != nil {
		return nil, err
	}
	log = log.With("node", node)
	reach := apiconn.NewReach(log, time.Now)
	o := agentpkg.Options{Listen: serve.DefaultListen, Interval: serve.DefaultInterval, Metadata: podsource.Kubernetes,
		Kubeconfig: kubeconfig, NodeName: node, Events: true,
		Fix: []string{rules.MisplacedContainer, rules.SizeBlindWeights, rules.BestEffortStarvation}, Log: log,
		WrapTransport: func(http.RoundTripper) http.RoundTripper { return reqs.wrap(reach.Wrap(own)) }}
	cfg, err := o.Config()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m, err := cfg.OpenMeta(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	a := &agent{node: node, meta: m}
	done := make(chan struct{})
	go func() {
		defer close(done)
		scan := time.NewTicker(cfg.Interval)
		defer scan.Stop()
		for {
			if _, err := m.Sizes.Sizes(ctx); err != nil {
				a.lastErr.Store(err)
			} else {
				a.sized.Add(1)
			}
			select {
			case <-ctx.Done():
				return
			case <-scan.C:
			case <-m.Changes.C():
			}
		}
	}()
	a.stop = func() {
		cancel()
		<-done
		m.Close()
		// Its connection goes with it (a node's agent that exits closes
		// its socket).
		utilnet.CloseIdleConnectionsFor(own)
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
