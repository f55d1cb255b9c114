package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/rest"
)

// apiStub is the API server's TokenReview and SubjectAccessReview
// endpoints over real HTTP: it accepts the jwt token "scraper" (allowed
// nodes/metrics), refuses every other token, takes delay per review, and
// counts reviews and the most it ever had in flight.
type apiStub struct {
	delay          time.Duration
	inFlight, most atomic.Int64
	authn, authz   atomic.Int64
	mu             sync.Mutex
}

func (s *apiStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.most.Load()
		if n <= m || s.most.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(s.delay)
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		s.authn.Add(1)
		var tr authnv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		if tokenName(tr.Spec.Token) == "scraper" {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:kube-system:metrics-server"}}
		}
		tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
		_ = json.NewEncoder(w).Encode(&tr)
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		s.authz.Add(1)
		var sar authzv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		a := sar.Spec.ResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "system:serviceaccount:kube-system:metrics-server" && a != nil && a.Subresource == "metrics" && a.Name == "n1"
		sar.APIVersion, sar.Kind = "authorization.k8s.io/v1", "SubjectAccessReview"
		_ = json.NewEncoder(w).Encode(&sar)
	default:
		http.NotFound(w, r)
	}
}

// stubbedAgent is an agent serving the seed snapshot behind Auth, whose
// reviews go over HTTP (APIReviewer) to stub.
func stubbedAgent(t *testing.T, stub *apiStub, a *Auth) (agent *httptest.Server, metrics func(string) string) {
	t.Helper()
	api := httptest.NewServer(stub)
	t.Cleanup(api.Close)
	rv, err := NewAPIReviewer(&rest.Config{Host: api.URL, QPS: -1,
		// The stub speaks JSON; client-go asks for protobuf by default.
		ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	a.Reviewer, a.Node = rv, "n1"
	s := feedExample(t, "seed-003-k3s-spin", nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(a)
	agent = httptest.NewServer(a.Wrap(s.Handler()))
	t.Cleanup(agent.Close)
	return agent, func(name string) string {
		var b strings.Builder
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					var labels []string
					for _, l := range m.GetLabel() {
						labels = append(labels, l.GetName()+"="+l.GetValue())
					}
					v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
					fmt.Fprintf(&b, "{%s} %g\n", strings.Join(labels, ","), v)
				}
			}
		}
		return b.String()
	}
}

func getWith(client *http.Client, url, token string) (int, http.Header, error) {
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 && resp.StatusCode != 401 {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, fmt.Errorf("%s", strings.TrimSpace(string(b)))
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header, nil
}

// Tokens over 8 KiB or not shaped like a JWT are refused without a review,
// and counted.
func TestAuthRefusesMalformedWithoutReview(t *testing.T) {
	stub := &apiStub{}
	a := &Auth{}
	agent, metrics := stubbedAgent(t, stub, a)
	long := jwt(strings.Repeat("x", MaxTokenBytes))
	for _, tok := range []string{"garbage", "a.b", "a.b.c.d", "a..c", "a.b.c=", "a.b.c+", long} {
		code, hdr, err := getWith(http.DefaultClient, agent.URL+"/metrics/resource", tok)
		if code != 401 || hdr.Get("WWW-Authenticate") == "" {
			t.Errorf("token %.20q: %d %v", tok, code, err)
		}
	}
	if n := stub.authn.Load(); n != 0 {
		t.Errorf("%d token reviews for malformed tokens", n)
	}
	if got := metrics("cgwarden_auth_requests_total"); !strings.Contains(got, "{result=malformed} 7") {
		t.Errorf("cgwarden_auth_requests_total:\n%s", got)
	}
}

func TestCheckTokenShape(t *testing.T) {
	for tok, ok := range map[string]bool{
		jwt("x"): true, "eyJh.eyJz.c2ln": true, "a-_b.c.d": true,
		"": false, "abc": false, "a.b": false, "a.b.c.d": false, ".b.c": false, "a.b.": false,
		"a.b.c=": false, "a b.c.d": false, "a/b.c.d": false, "abcdef.0123456789abcdef": false,
		jwt(strings.Repeat("y", MaxTokenBytes)): false,
	} {
		if err := CheckTokenShape(tok); (err == nil) != ok {
			t.Errorf("CheckTokenShape(%.30q): %v, want ok=%v", tok, err, ok)
		}
	}
}

func FuzzCheckTokenShape(f *testing.F) {
	for _, s := range []string{jwt("x"), "a.b.c", "a..c", "", "....", "a.b.c.d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		if CheckTokenShape(tok) != nil {
			return
		}
		parts := strings.Split(tok, ".")
		if len(tok) > MaxTokenBytes || len(parts) != 3 || slices.Contains(parts, "") {
			t.Errorf("accepted %q", tok)
		}
	})
}

// gate is a Reviewer whose reviews block until the test opens the gate
// (or the review's context ends); "scraper" is valid and may get
// nodes/metrics.
type gate struct {
	open    chan struct{}
	entered chan string
	authn   atomic.Int64
}

func newGate() *gate { return &gate{open: make(chan struct{}), entered: make(chan string, 100)} }

func (g *gate) Authenticate(ctx context.Context, token, _ string) (authnv1.UserInfo, bool, error) {
	g.authn.Add(1)
	g.entered <- tokenName(token)
	select {
	case <-g.open:
	case <-ctx.Done():
		return authnv1.UserInfo{}, false, ctx.Err()
	}
	if tokenName(token) == "scraper" {
		return authnv1.UserInfo{Username: "scraper"}, true, nil
	}
	return authnv1.UserInfo{}, false, nil
}

func (g *gate) Authorize(_ context.Context, u authnv1.UserInfo, _, sub string) (bool, string, error) {
	return u.Username == "scraper" && sub == "metrics", "", nil
}

type result struct {
	code  int
	retry string
}

func do(h http.Handler, token string) result {
	r := httptest.NewRequest("GET", "/metrics/resource", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return result{w.Code, w.Header().Get("Retry-After")}
}

// With every open slot taken, a new token gets 429 with Retry-After and
// no review, but the renewal of a token the API server accepted before
// takes a reserved slot.
func TestAuthCapsReviewsInFlight(t *testing.T) {
	g := newGate()
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	a := &Auth{Reviewer: g, Node: "n1", MaxReviews: 4, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	h := a.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	// The scraper's token, accepted once; then its decision expires.
	close(g.open)
	if r := do(h, jwt("scraper")); r.code != 200 {
		t.Fatalf("scraper: %d", r.code)
	}
	<-g.entered
	g.open = make(chan struct{})
	mu.Lock()
	now = now.Add(3 * time.Minute)
	mu.Unlock()

	// Two garbage tokens take the two open slots (4 - 2 reserved).
	results := make(chan result, 10)
	for i := range 2 {
		go func() { results <- do(h, jwt(fmt.Sprint("garbage", i))) }()
		<-g.entered
	}
	if r := do(h, jwt("garbage-third")); r.code != http.StatusTooManyRequests || r.retry != "1" {
		t.Errorf("a third new token with both open slots taken: %d Retry-After %q, want 429 1", r.code, r.retry)
	}
	go func() { results <- do(h, jwt("scraper")) }()
	if who := <-g.entered; who != "scraper" {
		t.Errorf("reviewed %q, want the scraper's renewal", who)
	}
	if n := g.authn.Load(); n != 4 {
		t.Errorf("%d reviews, want 4 (the 429 made none)", n)
	}
	if v := testutil.ToFloat64(a.m.inFlight); v != 3 {
		t.Errorf("cgwarden_auth_reviews_in_flight %v, want 3", v)
	}
	close(g.open)
	var codes []int
	for range 3 {
		codes = append(codes, (<-results).code)
	}
	slices.Sort(codes)
	if !slices.Equal(codes, []int{200, 401, 401}) {
		t.Errorf("codes %v, want the scraper's 200 and the garbage's 401s", codes)
	}
	if v := testutil.ToFloat64(a.m.requests.WithLabelValues("throttled")); v != 1 {
		t.Errorf("throttled requests counted %v, want 1", v)
	}
}

// Concurrent requests with one token share one review: the nine that
// come while the first one's review waits on the API server join it.
func TestAuthMergesDuplicateReviews(t *testing.T) {
	g := newGate()
	a := &Auth{Reviewer: g, Node: "n1"}
	h := a.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	results := make(chan result, 10)
	for range 10 {
		go func() { results <- do(h, jwt("same-garbage")) }()
	}
	<-g.entered
	deadline := time.Now().Add(30 * time.Second)
	for a.waiting.Load() < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 10 requests waiting on a review after 30s", a.waiting.Load())
		}
		time.Sleep(time.Millisecond)
	}
	close(g.open)
	for range 10 {
		if r := <-results; r.code != 401 {
			t.Errorf("code %d, want 401", r.code)
		}
	}
	if n := g.authn.Load(); n != 1 {
		t.Errorf("%d token reviews for 10 concurrent requests with one token, want 1", n)
	}
	if v := testutil.ToFloat64(a.m.merged.WithLabelValues("token")); v != 9 {
		t.Errorf("merged reviews counted %v, want the nine that joined the first", v)
	}
}

// A review the API server does not answer within ReviewTimeout is a 503,
// counted as a timeout, and frees its slot.
func TestAuthReviewTimeout(t *testing.T) {
	g := newGate() // never opened
	a := &Auth{Reviewer: g, Node: "n1", ReviewTimeout: 50 * time.Millisecond, MaxReviews: 3}
	h := a.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	for i := range 3 {
		if r := do(h, jwt(fmt.Sprint("slow", i))); r.code != http.StatusServiceUnavailable {
			t.Errorf("review %d unanswered: %d, want 503", i, r.code)
		}
	}
	if v := testutil.ToFloat64(a.m.reviews.WithLabelValues("token", "timeout")); v != 3 {
		t.Errorf("timeouts counted %v, want 3", v)
	}
	if v := testutil.ToFloat64(a.m.inFlight); v != 0 {
		t.Errorf("%v reviews still in flight", v)
	}
}

// Many more made-up tokens than the cache holds do not evict the
// scraper's decision: its token is reviewed once.
func TestAuthCacheKeepsScraper(t *testing.T) {
	rv := &fakeReviewer{}
	h := (&Auth{Reviewer: rv, Node: "n1"}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	for i := range maxCached + maxCached/4 {
		if i%500 == 0 {
			if r := do(h, jwt("reader")); r.code != 200 {
				t.Fatalf("scraper after %d made-up tokens: %d", i, r.code)
			}
		}
		if r := do(h, jwt(fmt.Sprint("made-up-", i))); r.code != 401 {
			t.Fatalf("made-up token %d: %d", i, r.code)
		}
	}
	if want := 1 + maxCached + maxCached/4; rv.authn != want {
		t.Errorf("%d token reviews, want %d: the scraper's token was reviewed again", rv.authn, want)
	}
}

// The abuse, CI-sized: 5,000 made-up JWT-shaped tokens from 200
// concurrent clients over real HTTP, reviews over real HTTP by a stub API
// server that takes 20 ms each, while a scraper with a valid token scrapes
// every 20 ms. The agent's clock runs 60 times faster than the wall's, so
// the scraper's 2-minute decision expires every 2 s and is renewed during
// the flood. The stub never sees more than the cap in flight, the scraper
// always gets 200, and /metrics counts every refusal. Its latencies are
// logged (docs/benchmarks.md), not asserted.
func TestAuthUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	stub := &apiStub{delay: 20 * time.Millisecond}
	start := time.Now()
	a := &Auth{Now: func() time.Time { return start.Add(60 * time.Since(start)) }}
	agent, metrics := stubbedAgent(t, stub, a)
	const garbage, clients = 5000, 200
	// The scraper was scraping before the flood (a token first seen
	// during a flood competes with it for the open slots: docs/security.md).
	if code, _, err := getWith(http.DefaultClient, agent.URL+"/metrics/resource", jwt("scraper")); err != nil || code != 200 {
		t.Fatalf("the scraper before the flood: %d %v", code, err)
	}
	// The baseline: the same scrapes with no flood.
	var base []time.Duration
	for range 50 {
		t0 := time.Now()
		if code, _, err := getWith(http.DefaultClient, agent.URL+"/metrics/resource", jwt("scraper")); err != nil || code != 200 {
			t.Fatalf("the scraper before the flood: %d %v", code, err)
		}
		base = append(base, time.Since(t0))
		time.Sleep(20 * time.Millisecond)
	}
	tokens := make(chan string, garbage)
	for i := range garbage {
		tokens <- jwt(fmt.Sprintf(`{"sub":"made-up-%d"}`, i))
	}
	close(tokens)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range clients {
		wg.Go(func() {
			for tok := range tokens {
				code, hdr, _ := getWith(client, agent.URL+"/metrics/resource", tok)
				if (code != 401 && code != 429) || (code == 429 && hdr.Get("Retry-After") == "") {
					failed.Add(1)
				}
			}
		})
	}
	flood := make(chan struct{})
	go func() { wg.Wait(); close(flood) }()
	var lat []time.Duration
	scraper := &http.Client{}
	for done := false; !done; {
		select {
		case <-flood:
			done = true
		case <-time.After(20 * time.Millisecond):
		}
		t0 := time.Now()
		code, _, err := getWith(scraper, agent.URL+"/metrics/resource", jwt("scraper"))
		lat = append(lat, time.Since(t0))
		if err != nil || code != 200 {
			t.Errorf("the scraper's request %d during the flood: %d %v", len(lat), code, err)
		}
	}
	elapsed := time.Since(start)
	if n := failed.Load(); n != 0 {
		t.Errorf("%d made-up tokens were not answered 401 or 429 with Retry-After", n)
	}
	if most := stub.most.Load(); most > DefaultMaxReviews {
		t.Errorf("the API server had %d reviews in flight, over the cap of %d", most, DefaultMaxReviews)
	}
	got := metrics("cgwarden_auth_requests_total")
	var refused float64
	for _, r := range []string{"throttled", "unauthenticated"} {
		var v float64
		for _, line := range strings.Split(got, "\n") {
			if strings.HasPrefix(line, "{result="+r+"} ") {
				fmt.Sscan(strings.TrimPrefix(line, "{result="+r+"} "), &v)
			}
		}
		refused += v
	}
	if refused != garbage {
		t.Errorf("refusals counted %v, want %d:\n%s", refused, garbage, got)
	}
	slices.Sort(lat)
	slices.Sort(base)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	qb := func(p float64) time.Duration { return base[min(len(base)-1, int(p*float64(len(base))))] }
	t.Logf("%d made-up tokens from %d clients in %s; API server: %d token reviews, %d access reviews, at most %d in flight (cap %d)",
		garbage, clients, elapsed.Round(time.Millisecond), stub.authn.Load(), stub.authz.Load(), stub.most.Load(), DefaultMaxReviews)
	t.Logf("scraper: %d requests, all 200; latency p50 %s, p99 %s, max %s; with no flood p50 %s, p99 %s (p99 %.0f× the baseline's)",
		len(lat), q(0.5), q(0.99), lat[len(lat)-1], qb(0.5), qb(0.99), float64(q(0.99))/float64(qb(0.99)))
	t.Logf("/metrics:\n%s%s", got, metrics("cgwarden_auth_reviews_total"))
}
