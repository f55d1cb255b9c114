package serve

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// NRIMetricsPath is where the agent relays `cgwarden nri`'s /metrics
// (Config.NRIMetrics), as the kubelet serves cAdvisor's on /metrics/cadvisor.
const NRIMetricsPath = "/metrics/nri"

// relayTimeout bounds one relayed scrape (the plugin answers from memory).
const relayTimeout = 5 * time.Second

// CheckNRIMetrics accepts the address of `cgwarden nri`'s metrics listener
// (its --listen): a loopback IP and a port. The plugin serves plain,
// unauthenticated HTTP on the node's loopback; the agent relays it behind
// its own TLS and authentication, and is no proxy to anywhere else.
func CheckNRIMetrics(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--nri-metrics %q: %w", addr, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil || port == "0" {
		return fmt.Errorf("--nri-metrics %q: want the port cgwarden nri --listen serves on", addr)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--nri-metrics %q: want a loopback IP address (127.0.0.1 or ::1), where cgwarden nri --listen serves", addr)
	}
	return nil
}

// nriRelay serves GET /metrics of the plugin at addr: the request's
// Accept and Accept-Encoding go through (Prometheus negotiates the format
// with the plugin), its credentials do not. The plugin unreachable or
// answering an error is a 502, which the scraper records as up == 0.
func nriRelay(addr string, log *slog.Logger) http.Handler {
	target := &url.URL{Scheme: "http", Host: addr, Path: "/metrics"}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL = target
			r.Out.Host = addr
			r.Out.Header.Del("Authorization")
			r.Out.Header.Del("Cookie")
		},
		Transport: &http.Transport{Proxy: nil, ResponseHeaderTimeout: relayTimeout, MaxIdleConns: 2, IdleConnTimeout: time.Minute},
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("cgwarden nri at %s answered %s", addr, resp.Status)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("relaying cgwarden nri's metrics failed", "addr", addr, "err", err)
			http.Error(w, "cgwarden nri's metrics: "+err.Error(), http.StatusBadGateway)
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), relayTimeout)
		defer cancel()
		proxy.ServeHTTP(w, r.WithContext(ctx))
	})
}
