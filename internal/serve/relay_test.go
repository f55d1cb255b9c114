package serve

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/nriplugin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// fakePlugin serves the NRI plugin's real series on a loopback port, as
// `cgwarden nri --listen` does, and keeps the last request's headers.
func fakePlugin(t *testing.T) (addr string, last *http.Header) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := nriplugin.NewMetrics(reg)
	m.Connected.Set(1)
	m.Containers.WithLabelValues("spin", nriplugin.ResultPlaced).Inc()
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	last = &http.Header{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*last = r.Header.Clone()
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), last
}

// /metrics/nri is the plugin's /metrics, behind the agent's
// authentication (nodes/metrics, as /metrics), without the scraper's
// credentials on the way to the plugin, in the format the scraper asked
// for; not served without --nri-metrics.
func TestNRIMetricsRelayed(t *testing.T) {
	addr, last := fakePlugin(t)
	s := feedExampleTo(t, Config{NodeName: "n1", NRIMetrics: addr}, "seed-003-k3s-spin", nil)
	agent := httptest.NewServer((&Auth{Reviewer: &fakeReviewer{}, Node: "n1"}).Wrap(s.Handler()))
	defer agent.Close()
	scrape := func(token, accept string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("GET", agent.URL+NRIMetricsPath, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+jwt(token))
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b), resp.Header
	}

	for token, want := range map[string]int{"": 401, "nobody": 403} {
		*last = http.Header{}
		if code, body, _ := scrape(token, ""); code != want {
			t.Errorf("token %q: %d, want %d: %.200s", token, code, want, body)
		}
		if len(*last) != 0 {
			t.Errorf("token %q: the plugin was asked (%v) though the agent refused", token, *last)
		}
	}

	code, body, _ := scrape("reader", "")
	if code != 200 {
		t.Fatalf("reader: %d: %.300s", code, body)
	}
	for _, want := range []string{"cgwarden_nri_connected 1", `cgwarden_nri_containers_total{handler="spin",result="placed"} 1`, `cgwarden_nri_failures_total{reason="cannot_place"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics/nri lacks %s:\n%s", want, body)
		}
	}
	if a := last.Get("Authorization"); a != "" {
		t.Errorf("the scraper's credentials reached the plugin: %q", a)
	}

	// The format is the plugin's answer to the scraper's Accept: protobuf
	// asked, protobuf answered.
	_, body, h := scrape("reader", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited")
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/vnd.google.protobuf") || strings.Contains(body, "# HELP") {
		t.Errorf("protobuf asked: Content-Type %q, body %.100q", ct, body)
	}

	// Without --nri-metrics: not found.
	if code, _, _ := get(t, feedExample(t, "seed-003-k3s-spin", nil).Handler(), NRIMetricsPath); code != 404 {
		t.Errorf("without NRIMetrics: %d, want 404", code)
	}
}

// The plugin down or failing: 502, which Prometheus records as up == 0
// for the job, never an empty 200.
func TestNRIMetricsRelayPluginDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "broken", http.StatusInternalServerError)
	}))
	defer failing.Close()
	for name, addr := range map[string]string{"down": down, "failing": strings.TrimPrefix(failing.URL, "http://")} {
		s := feedExampleTo(t, Config{NodeName: "n1", NRIMetrics: addr}, "seed-003-k3s-spin", nil)
		code, body, _ := get(t, s.Handler(), NRIMetricsPath)
		if code != http.StatusBadGateway || !strings.Contains(body, "cgwarden nri") {
			t.Errorf("plugin %s: %d %q, want 502 naming cgwarden nri", name, code, body)
		}
	}
}

func TestCheckNRIMetrics(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:9532": true, "[::1]:9532": true,
		"0.0.0.0:9532": false, ":9532": false, "localhost:9532": false, "10.0.0.1:9532": false,
		"127.0.0.1": false, "127.0.0.1:x": false, "127.0.0.1:0": false, "http://127.0.0.1:9532": false} {
		if err := CheckNRIMetrics(addr); (err == nil) != ok {
			t.Errorf("CheckNRIMetrics(%q): %v, want ok=%v", addr, err, ok)
		}
	}
}
