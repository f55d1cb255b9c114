package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Flood's shape (docs/security.md, "Authentication"): tokens, clients,
// and the time the tokens are spread over, in bursts of one token a
// client.
const (
	floodTokens  = 5000
	floodClients = 200
	floodFor     = 30 * time.Second
	// reviewCap is the agent's cap on reviews in flight
	// (serve.DefaultMaxReviews; the shipped manifest sets no other).
	reviewCap = 8
)

// TestAgentUnderTokenFlood: the agent as shipped (testdata/agent:
// --authenticate, TokenReview and SubjectAccessReview through the lane's
// API server). 200 clients send 5,000 made-up JWT-shaped tokens over 30 s,
// in 25 bursts of 200 (each token needs a TokenReview: none is refused for
// its shape), while a scraper with a token allowed nodes/metrics reads
// /metrics/resource every 100 ms, as metrics-server does every 15 s. Every
// made-up token is answered 401 or 429 (with Retry-After) — 503 is
// counted and reported, a refusal too —; the scraper gets 200 every time
// (its latency's p50 and p99 reported); the agent's
// cgwarden_auth_reviews_in_flight, sampled every 50 ms, never goes above
// the cap; its RSS, sampled every 100 ms from the host, stays under the
// container's memory limit, and it is not restarted; its
// cgwarden_auth_requests_total counts each refusal under the outcome the
// client saw.
func TestAgentUnderTokenFlood(t *testing.T) {
	e := cluster(t)
	importAgentImage(t)
	e.installAgent(t, "testdata/agent")
	pod, spec := e.agentPod(t)
	pid := containerPID(t, pod, "cgwarden")
	limit := spec.Containers[0].Resources.Limits.Memory().Value()
	if limit <= 0 {
		t.Fatal("the shipped agent has no memory limit")
	}
	ns := e.namespace(t)
	get := e.agentReader(t, ns)
	// The scraper was scraping before the flood (a token first seen
	// during one competes with it for the open review slots:
	// docs/security.md).
	if code, body := get("/metrics/resource"); code != 200 {
		t.Fatalf("the scraper before the flood: %d %.200s", code, body)
	}
	before := authCounts(t, get)

	// Samplers: the agent's reviews in flight, its RSS.
	stop := make(chan struct{})
	var samplers sync.WaitGroup
	var mostInFlight, mostWaiting, inFlightSamples atomic.Int64
	samplers.Go(func() {
		re := regexp.MustCompile(`(?m)^cgwarden_auth_(reviews_in_flight|requests_waiting) (\S+)$`)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			code, body := get("/metrics")
			if code != 200 {
				continue
			}
			for _, m := range re.FindAllStringSubmatch(body, -1) {
				v, _ := strconv.ParseFloat(m[2], 64)
				most := &mostInFlight
				if m[1] == "requests_waiting" {
					most = &mostWaiting
				}
				for old := most.Load(); int64(v) > old && !most.CompareAndSwap(old, int64(v)); old = most.Load() {
				}
			}
			inFlightSamples.Add(1)
		}
	})
	rss0 := rssOf(pid)
	var mostRSS atomic.Int64
	samplers.Go(func() {
		for {
			if r := rssOf(pid); r > mostRSS.Load() {
				mostRSS.Store(r)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})

	// The flood.
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: floodClients, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var codes sync.Map // status code (0: a transport error) -> *atomic.Int64
	count := func(code int) {
		v, _ := codes.LoadOrStore(code, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	var noRetryAfter atomic.Int64
	per := floodTokens / floodClients
	gap := floodFor / time.Duration(per)
	start := time.Now()
	var flood sync.WaitGroup
	for c := range floodClients {
		flood.Go(func() {
			for i := range per {
				time.Sleep(time.Until(start.Add(time.Duration(i) * gap)))
				req, _ := http.NewRequest("GET", "https://127.0.0.1:9530/metrics/resource", nil)
				req.Header.Set("Authorization", "Bearer "+madeUpJWT(t, c, i))
				resp, err := client.Do(req)
				if err != nil {
					count(0)
					continue
				}
				resp.Body.Close()
				count(resp.StatusCode)
				if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
					noRetryAfter.Add(1)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { flood.Wait(); close(done) }()
	var lat []time.Duration
	var scrapeFailures []string
	for over := false; !over; {
		select {
		case <-done:
			over = true
		case <-time.After(100 * time.Millisecond):
		}
		t0 := time.Now()
		code, body := get("/metrics/resource")
		lat = append(lat, time.Since(t0))
		if code != 200 {
			scrapeFailures = append(scrapeFailures, fmt.Sprintf("at %v: %d %.100s", time.Since(start).Round(time.Millisecond), code, body))
		}
	}
	took := time.Since(start)
	close(stop)
	samplers.Wait()

	got := map[int]int64{}
	codes.Range(func(k, v any) bool { got[k.(int)] = v.(*atomic.Int64).Load(); return true })
	slices.Sort(lat)
	p := func(q float64) time.Duration {
		return lat[min(len(lat)-1, int(q*float64(len(lat))))].Round(time.Millisecond)
	}
	t.Logf("%d made-up tokens from %d clients in %v: answers %v; the scraper's %d requests: p50 %v, p99 %v, max %v",
		floodTokens, floodClients, took.Round(100*time.Millisecond), got, len(lat), p(0.5), p(0.99), lat[len(lat)-1].Round(time.Millisecond))
	t.Logf("reviews in flight at most %d (cap %d; %d samples), requests waiting at most %d; RSS %.1f MiB before, at most %.1f MiB (limit %.0f MiB)",
		mostInFlight.Load(), reviewCap, inFlightSamples.Load(), mostWaiting.Load(), mib(rss0), mib(mostRSS.Load()), mib(limit))
	for code, n := range got {
		if code != 401 && code != 429 && code != 503 {
			t.Errorf("%d made-up tokens answered %d (0: no answer), want 401 or 429", n, code)
		}
	}
	if n := noRetryAfter.Load(); n > 0 {
		t.Errorf("%d answers 429 without Retry-After", n)
	}
	if len(scrapeFailures) > 0 {
		t.Errorf("the scraper was not answered 200 %d times of %d: %s", len(scrapeFailures), len(lat), strings.Join(scrapeFailures[:min(5, len(scrapeFailures))], "; "))
	}
	if m := mostInFlight.Load(); m > reviewCap {
		t.Errorf("the agent had %d reviews in flight, over its cap of %d", m, reviewCap)
	}
	if inFlightSamples.Load() < 10 {
		t.Errorf("only %d samples of the agent's reviews in flight", inFlightSamples.Load())
	}
	if r := mostRSS.Load(); r >= limit {
		t.Errorf("the agent's RSS reached %.1f MiB, its limit is %.0f MiB", mib(r), mib(limit))
	}
	after := authCounts(t, get)
	now, err := e.cs.CoreV1().Pods("cgwarden-system").Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		result string
		code   int
	}{{"unauthenticated", 401}, {"throttled", 429}, {"unavailable", 503}} {
		if d := after[c.result] - before[c.result]; d != got[c.code] {
			t.Errorf("cgwarden_auth_requests_total{result=%q} grew by %d, the clients got %d answers %d", c.result, d, got[c.code], c.code)
		}
	}
	if d := after["malformed"] - before["malformed"]; d != 0 {
		t.Errorf("%d made-up tokens refused as malformed: the flood's tokens must each need a review", d)
	}
	t.Logf("TokenReviews sent: %v (before %v)", after["review:token"]-before["review:token"], before["review:token"])
	if now.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the agent restarted during the flood: %s", describe(now))
	}
}

// madeUpJWT is a JWT-shaped token no issuer signed: three unpadded
// base64url segments (header, claims, 32 random bytes).
func madeUpJWT(t *testing.T, client, i int) string {
	sig := make([]byte, 32)
	if _, err := rand.Read(sig); err != nil {
		t.Error(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","kid":"made-up"}`)) + "." +
		enc(fmt.Appendf(nil, `{"iss":"https://flood.invalid","sub":"client-%d-%d"}`, client, i)) + "." + enc(sig)
}

// authCounts reads the agent's cgwarden_auth_requests_total by result,
// and the sum of its TokenReviews as "review:token".
func authCounts(t *testing.T, get func(string) (int, string)) map[string]int64 {
	t.Helper()
	code, body := get("/metrics")
	if code != 200 {
		t.Fatalf("the agent's /metrics: %d %.200s", code, body)
	}
	out := map[string]int64{}
	for _, m := range regexp.MustCompile(`(?m)^cgwarden_auth_requests_total\{result="(\w+)"\} (\S+)$`).FindAllStringSubmatch(body, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		out[m[1]] = int64(v)
	}
	for _, m := range regexp.MustCompile(`(?m)^cgwarden_auth_reviews_total\{result="\w+",review="token"\} (\S+)$`).FindAllStringSubmatch(body, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		out["review:token"] += int64(v)
	}
	if len(out) == 0 {
		t.Fatalf("no cgwarden_auth_requests_total in the agent's /metrics")
	}
	return out
}

// rssOf is a host process's resident set, in bytes (0 when it is gone).
func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
