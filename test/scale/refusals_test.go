package scale

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// refusal is how the proxy refuses one resize PATCH.
type refusal struct {
	code int
	// retryAfter sends Retry-After: 1, with which client-go's REST client
	// retries the request itself (up to 10 times; a 429 or 5xx without it
	// is returned to the caller).
	retryAfter bool
}

// refusingProxy stands between the sizer and the lane's API server (an
// HTTPS server of its own, httptest's certificate): it
// refuses the first refusals resize PATCHes of each pod as refuse says
// (with refusals 0, none: refuse may be nil), and forwards everything
// else, the sizer's own credentials included, recording each resize
// PATCH it forwards with the API server's answer (TestSizerAtScale's
// failover counts them per pod and per replica).
type refusingProxy struct {
	url string
	// ca is the PEM certificate the proxy serves with (httptest's).
	ca       []byte
	refusals int
	refuse   func(pod string) refusal

	mu sync.Mutex
	// patches counts the resize PATCHes of each pod (namespace/name) that
	// reached the proxy, refused or forwarded.
	patches map[string]int
	// events counts the Event writes (create, update, patch) the API
	// server took.
	events int
	// resizes are the resize PATCHes the proxy forwarded, in the order
	// the API server answered them.
	resizes []forwardedResize
}

// forwardedResize is one resize PATCH forwarded to the API server: its pod
// (namespace/name), when it reached the proxy, when the API server
// answered, and its status code (0: no answer).
type forwardedResize struct {
	pod            string
	sent, answered time.Time
	code           int
}

// sentAt carries, in a forwarded request's context, when it reached the
// proxy.
type sentAt struct{}

// forwardedResizes is a copy of the resize PATCHes forwarded so far.
func (p *refusingProxy) forwardedResizes() []forwardedResize {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.resizes)
}

func (e *env) startRefusingProxy(t *testing.T, refusals int, refuse func(pod string) refusal) *refusingProxy {
	t.Helper()
	target, err := url.Parse(e.admin.Host)
	if err != nil {
		t.Fatal(err)
	}
	// The lane's CA, no credentials of the admin's: each request carries
	// the sizer's bearer token.
	rt, err := rest.TransportFor(rest.AnonymousClientConfig(e.admin))
	if err != nil {
		t.Fatal(err)
	}
	p := &refusingProxy{refusals: refusals, refuse: refuse, patches: map[string]int{}}
	forward := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			if _, ok := resizeOf(r.In); ok {
				// A resize goes on to the API server and its answer is
				// recorded even if the sizer that sent it is gone (killed
				// while the PATCH was on its way): what the API server
				// applied is what counts.
				r.Out = r.Out.WithContext(context.WithValue(context.WithoutCancel(r.Out.Context()), sentAt{}, time.Now()))
			}
		},
		Transport:     rt,
		FlushInterval: -1, // watches stream
		ModifyResponse: func(r *http.Response) error {
			if isEventWrite(r.Request) && r.StatusCode < 300 {
				p.mu.Lock()
				p.events++
				p.mu.Unlock()
			}
			p.resized(r.Request, r.StatusCode)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.resized(r, 0)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pod, ok := resizeOf(r); ok {
			p.mu.Lock()
			p.patches[pod]++
			n := p.patches[pod]
			p.mu.Unlock()
			if n <= p.refusals {
				writeRefusal(w, p.refuse(pod))
				return
			}
		}
		forward.ServeHTTP(w, r)
	}))
	// HTTPS, as the lane's API server: clientcmd gives a kubeconfig's
	// credentials only to an https server.
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	p.url = srv.URL
	p.ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return p
}

// resized records a forwarded resize PATCH's answer (code 0: none).
func (p *refusingProxy) resized(r *http.Request, code int) {
	pod, ok := resizeOf(r)
	if !ok {
		return
	}
	sent, _ := r.Context().Value(sentAt{}).(time.Time)
	p.mu.Lock()
	p.resizes = append(p.resizes, forwardedResize{pod: pod, sent: sent, answered: time.Now(), code: code})
	p.mu.Unlock()
}

// resizeOf reports whether r is a PATCH of a pod's resize subresource, and
// which pod (namespace/name).
func resizeOf(r *http.Request) (string, bool) {
	if r.Method != http.MethodPatch {
		return "", false
	}
	// /api/v1/namespaces/<ns>/pods/<name>/resize
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) != 7 || parts[0] != "api" || parts[2] != "namespaces" || parts[4] != "pods" || parts[6] != "resize" {
		return "", false
	}
	return parts[3] + "/" + parts[5], true
}

// isEventWrite reports whether r creates, updates or patches an Event
// (/api/v1/namespaces/<ns>/events[/<name>]).
func isEventWrite(r *http.Request) bool {
	if r.Method != http.MethodPost && r.Method != http.MethodPut && r.Method != http.MethodPatch {
		return false
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	return (len(parts) == 5 || len(parts) == 6) && parts[0] == "api" && parts[2] == "namespaces" && parts[4] == "events"
}

// writeRefusal answers as the API server does when it refuses: a Status.
func writeRefusal(w http.ResponseWriter, r refusal) {
	reason := metav1.StatusReasonInternalError
	if r.code == http.StatusTooManyRequests {
		reason = metav1.StatusReasonTooManyRequests
	}
	if r.retryAfter {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(r.code)
	_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status: metav1.StatusFailure, Code: int32(r.code), Reason: reason, Message: "refused by the scale test's proxy"})
}

// TestSizerRetriesRefusedResizes: the real sizer, through a proxy that
// refuses the first 3 resize PATCHes of every pod, still brings every
// runner pod to its VM's size (issue 39: a refused resize used to wait
// for the VM's next change). A third of the pods are refused with 500, a
// third with 429, both without Retry-After: the sizer's controller sees
// each refusal, counts it (cgwarden_sizer_resizes_total{result="failed"})
// and retries with backoff. The last third get 429 with Retry-After: 1,
// which client-go's REST client retries inside the one PATCH call: the
// controller never sees those refusals, and does not count them. Every
// pod's resize reaches the proxy exactly 4 times (3 refused, 1 applied).
// The sizer's Events are counted as the API server took them
// (cgwarden_sizer_events_total{result="sent"}, issue 39): one CPUResized
// per pod and one CPUResizeFailed per pod it saw refused, exactly the
// Event writes that went through the proxy.
func TestSizerRetriesRefusedResizes(t *testing.T) {
	e := lane(t)
	e.setup(t)
	nVMs := envInt(t, "CGWARDEN_SCALE_REFUSED_VMS", 30)
	const refusals = 3
	ns := e.testNamespace(t, "refused")
	e.makeNodes(t, 1)
	vms := make([]vm, nVMs)
	group := map[string]int{} // pod (namespace/name) → 0: 500, 1: 429, 2: 429 with Retry-After
	for i := range vms {
		vms[i] = vm{ns: ns, name: fmt.Sprintf("vm-%03d", i), node: nodeName(0), milli: 1000}
		group[ns+"/"+vms[i].name+"-runner"] = i % 3
	}
	e.makeVMs(t, vms, true)
	proxy := e.startRefusingProxy(t, refusals, func(pod string) refusal {
		switch group[pod] {
		case 0:
			return refusal{code: http.StatusInternalServerError}
		case 1:
			return refusal{code: http.StatusTooManyRequests}
		}
		return refusal{code: http.StatusTooManyRequests, retryAfter: true}
	})
	s := e.startSizerVia(t, proxy.url, proxy.ca, 100)
	before := s.metrics(t)

	ctx := context.Background()
	final := map[string]int64{}
	for i, v := range vms {
		final[v.name] = int64(1250 + 250*(i%8))
	}
	t0 := time.Now()
	if err := bulk(nVMs, 16, func(i int) error { return e.setUse(ctx, vms[i], final[vms[i].name]) }); err != nil {
		t.Fatal(err)
	}
	e.waitRequests(t, ns, final, 60*time.Second)
	took := time.Since(t0)
	after := s.metrics(t)

	proxy.mu.Lock()
	seen := map[string]int{}
	for pod, n := range proxy.patches {
		seen[pod] = n
	}
	proxy.mu.Unlock()
	visible := 0
	for pod, g := range group {
		if seen[pod] != refusals+1 {
			t.Errorf("%s: %d resize PATCHes at the proxy, want %d (%d refused, then one applied)", pod, seen[pod], refusals+1, refusals)
		}
		if g != 2 {
			visible += refusals
		}
	}
	count := func(result string) float64 {
		sel := map[string]string{"result": result}
		return after.sum("cgwarden_sizer_resizes_total", sel, nil) - before.sum("cgwarden_sizer_resizes_total", sel, nil)
	}
	failed, retried, resized := count("failed"), count("retried"), count("resized")

	// Events are written after the resizes, by the recorder's goroutine.
	wantEvents := map[string]float64{"CPUResized": float64(nVMs), "CPUResizeFailed": float64(visible / refusals)}
	var sent map[string]float64
	var written int
	poll.Every(500*time.Millisecond).Until(t, 30*time.Second, "the sizer's Events written and counted", func() (bool, string, error) {
		m, err := httpsMetrics(ctx, s.metricsURL)
		if err != nil {
			return false, err.Error(), nil
		}
		sent = map[string]float64{}
		for reason := range wantEvents {
			sel := map[string]string{"reason": reason, "result": "sent"}
			sent[reason] = m.sum("cgwarden_sizer_events_total", sel, nil) - before.sum("cgwarden_sizer_events_total", sel, nil)
		}
		proxy.mu.Lock()
		written = proxy.events
		proxy.mu.Unlock()
		return maps.Equal(sent, wantEvents) && float64(written) == sent["CPUResized"]+sent["CPUResizeFailed"],
			fmt.Sprintf("sent %v, want %v; %d Event writes taken by the API server", sent, wantEvents, written), nil
	})
	record(t, "sizer-refused", map[string]any{"vms": nVMs, "refusalsPerPod": refusals, "failed": failed, "retried": retried,
		"resized": resized, "convergedSeconds": took.Seconds(), "eventsSent": sent, "eventWrites": written})
	if failed != float64(visible) {
		t.Errorf("cgwarden_sizer_resizes_total{result=\"failed\"} rose by %.0f; want %d: the %d refusals without Retry-After (those with it client-go retries itself)",
			failed, visible, visible)
	}
	if resized != float64(nVMs) {
		t.Errorf("cgwarden_sizer_resizes_total{result=\"resized\"} rose by %.0f, want %d", resized, nVMs)
	}
	if retried < float64(visible)/float64(refusals) {
		t.Errorf("cgwarden_sizer_resizes_total{result=\"retried\"} rose by %.0f; want at least one per VM refused without Retry-After", retried)
	}
	t.Logf("%d VMs resized through %d refusals each in %v", nVMs, refusals, took.Round(10*time.Millisecond))
}
