package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// volatile are /metrics lines that depend on the test process itself (as
// in internal/serve's golden test).
var volatile = regexp.MustCompile(`^((# (HELP|TYPE) )?(go_|process_|cgwarden_scan_duration_seconds)|cgwarden_build_info\{)`)

// served builds serve's agent as the command does — serve's flags at their
// defaults, then args parsed, then set applied to the options — and
// returns the bodies it serves at paths.
func served(t *testing.T, node string, args []string, set func(*Options), paths ...string) map[string]string {
	t.Helper()
	o := &Options{}
	so := newServeOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	so.addFlags(fs, o)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	set(o)
	ao := so.agentOptions(o)
	ao.NodeName, ao.Log = node, slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg, err := ao.Config()
	if err != nil {
		t.Fatal(err)
	}
	a, err := cfg.Complete(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	out := map[string]string{}
	for _, p := range paths {
		rec := httptest.NewRecorder()
		a.Server.Handler().ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		if rec.Code != 200 {
			t.Fatalf("%s: %d %s", p, rec.Code, rec.Body)
		}
		out[p] = rec.Body.String()
	}
	return out
}

// stable leaves out the lines that depend on the test process (volatile).
func stable(body string) string {
	var keep []string
	for _, l := range strings.Split(body, "\n") {
		if !volatile.MatchString(l) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// TestServeDefaultsMatchGolden builds serve's server the way the command
// does with no flag given and checks that it serves seed 003 exactly as
// internal/serve's golden files say: the goldens are the production
// configuration, so a series declared but not filled by default (or
// filled only by a test's configuration) fails here.
func TestServeDefaultsMatchGolden(t *testing.T) {
	bodies := served(t, "k3s-node", nil, func(o *Options) { o.Snapshot = "example:seed-003-k3s-spin" },
		"/metrics", "/metrics/resource", "/stats/summary?only_cpu_and_memory=true")
	for _, c := range []struct{ url, golden string }{
		{"/metrics", "seed-003.metrics.txt"},
		{"/metrics/resource", "seed-003.metrics-resource.txt"},
		{"/stats/summary?only_cpu_and_memory=true", "seed-003.stats-summary.json"},
	} {
		got := bodies[c.url]
		if c.url == "/metrics" {
			got = stable(got)
		}
		want, err := os.ReadFile("../serve/testdata/golden/" + c.golden)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("%s served with serve's defaults differs from internal/serve/testdata/golden/%s:\n%s", c.url, c.golden, got)
		}
	}
}

// TestServedAuditCarriesVMSizes: serve on seed 000 (the EKS node whose
// NeonVM runner pods the kubelet weighs as BestEffort) with its pods and
// VMs files: the served /metrics and /audit carry the VMs' live sizes
// (spec.guest.cpus.use, which NeonVM's autoscaler moves away from the size
// the runner pod was started with) from the one metadata view the weight
// holder of `serve --fix` uses. The declared cores served differ from
// those served without the VMs file, so the VMs' sizes, not only the
// runners' own arguments, reach what is served; goldens in
// testdata/golden.
func TestServedAuditCarriesVMSizes(t *testing.T) {
	serve := func(vms string) map[string]string {
		t.Helper()
		out := served(t, "eks-node", nil, func(o *Options) {
			o.Snapshot, o.PodsFile, o.VMsFile = "example:seed-000-eks-neonvm", seed000+".pods.json", vms
		}, "/metrics", "/audit")
		for p, b := range out {
			out[p] = stable(b)
		}
		return out
	}
	declared := func(metrics string) (lines []string) {
		for _, l := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(l, "cgwarden_pod_cpu_declared_cores{") {
				lines = append(lines, l)
			}
		}
		return lines
	}
	with, without := serve(seed000+".vms.json"), serve("")
	if len(declared(with["/metrics"])) == 0 {
		t.Error("/metrics serves no cgwarden_pod_cpu_declared_cores with the VMs file")
	}
	if with["/audit"] == without["/audit"] {
		t.Error("/audit is the same with and without the VMs file: the VMs' sizes do not reach it")
	}
	// NeonVM's autoscaler moved compute-green-meadow from the 4 CPUs its
	// runner was started with (-vmspec) to 2: the served size follows.
	b, err := os.ReadFile(seed000 + ".vms.json")
	if err != nil {
		t.Fatal(err)
	}
	moved := strings.Replace(string(b), `"use": "4"`, `"use": "2"`, 1)
	if moved == string(b) {
		t.Fatal(`the seed's VMs file has no "use": "4" to move`)
	}
	p := filepath.Join(t.TempDir(), "vms.json")
	if err := os.WriteFile(p, []byte(moved), 0o644); err != nil {
		t.Fatal(err)
	}
	want := `cgwarden_pod_cpu_declared_cores{namespace="default",pod="compute-green-meadow-90412257-fec64",uid="77bce43d-ba38-441d-a05c-9521046406c9"} 2`
	if got := declared(serve(p)["/metrics"]); !slices.Contains(got, want) {
		t.Errorf("after the VM's use moved to 2, /metrics serves:\n%s\nwant the line\n%s", strings.Join(got, "\n"), want)
	}
	golden(t, "serve-seed-000-vms.metrics.txt", []byte(with["/metrics"]))
	golden(t, "serve-seed-000-vms.audit.json", []byte(with["/audit"]))
}
