package cli

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/nriplugin"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/sizer"
)

// promtoolPath is Debian's promtool (package prometheus); without it the
// test skips, or fails when CGWARDEN_REQUIRE_REAL=1. In the v2 lane's guest
// (which has no promtool and whose kernel does not change an exposition)
// it skips: the host lane runs it.
func promtoolPath(t *testing.T) string {
	t.Helper()
	return realtest.HostTool(t, "prometheus", "promtool")
}

// checkMetrics runs `promtool check metrics` on an exposition: its lint
// (names, units, suffixes, HELP) must report nothing.
func checkMetrics(t *testing.T, promtool, what, exposition string) {
	t.Helper()
	if !strings.Contains(exposition, "# TYPE cgwarden_") {
		t.Fatalf("%s: no cgwarden series in:\n%s", what, exposition)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics on %s: %v\n%s", what, err, out)
	}
}

// TestMetricsHygiene: `promtool check metrics` finds nothing to say about
// serve's /metrics built as the command builds it, on both example
// snapshots (seed-000 named by its pods file, so the declared VM sizes are
// served), with and without --demand; nor about the series of the
// adoption loop, cgwarden nri and cgwarden-sizer, registered as their
// commands register them.
func TestMetricsHygiene(t *testing.T) {
	promtool := promtoolPath(t)
	for _, c := range []struct{ snapshot, pods string }{
		{"example:seed-000-eks-neonvm", seed000 + ".pods.json"},
		{"example:seed-003-k3s-spin", ""},
	} {
		for _, demand := range []bool{false, true} {
			what := fmt.Sprintf("serve --snapshot %s --demand=%v", c.snapshot, demand)
			body := served(t, "node", []string{fmt.Sprintf("--demand=%v", demand)}, func(o *Options) {
				o.Snapshot, o.PodsFile = c.snapshot, c.pods
			}, "/metrics")["/metrics"]
			if demand != strings.Contains(body, "cgwarden_pod_cpu_fair_cores{") {
				t.Errorf("%s: fair-share series served: %v", what, !demand)
			}
			if c.pods != "" && !strings.Contains(body, "cgwarden_pod_cpu_declared_cores{") {
				t.Errorf("%s: no declared VM size served", what)
			}
			checkMetrics(t, promtool, what, body)
		}
	}

	adopt := prometheus.NewRegistry()
	adopt.MustRegister(hold.NewAdoptionMetrics().Collectors()...)
	nri := prometheus.NewRegistry()
	nriplugin.NewMetrics(nri).Containers.WithLabelValues("wasmtime-spin-v2", nriplugin.ResultPlaced).Inc()
	sz := prometheus.NewRegistry()
	sz.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	sizer.NewMetrics(sz)
	for what, reg := range map[string]*prometheus.Registry{"serve --fix's adoption loop": adopt, "cgwarden nri": nri, "cgwarden-sizer": sz} {
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		checkMetrics(t, promtool, what, rec.Body.String())
	}
}
