package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// volatile are /metrics lines that depend on the test process itself (as
// in internal/serve's golden test).
var volatile = regexp.MustCompile(`^((# (HELP|TYPE) )?(go_|process_|cgwarden_scan_duration_seconds)|cgwarden_build_info\{)`)

// TestServeDefaultsMatchGolden builds serve's server the way the command
// does with no flag given and checks that it serves seed 003 exactly as
// internal/serve's golden files say: the goldens are the production
// configuration, so a series declared but not filled by default (or
// filled only by a test's configuration) fails here.
func TestServeDefaultsMatchGolden(t *testing.T) {
	o := &Options{Snapshot: "example:seed-003-k3s-spin"}
	so := newServeOptions()
	so.addFlags(pflag.NewFlagSet("serve", pflag.ContinueOnError), o)
	ao := so.agentOptions(o)
	ao.NodeName, ao.Log = "k3s-node", slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg, err := ao.Config()
	if err != nil {
		t.Fatal(err)
	}
	a, err := cfg.Complete(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	h := a.Server.Handler()
	for _, c := range []struct{ url, golden string }{
		{"/metrics", "seed-003.metrics.txt"},
		{"/metrics/resource", "seed-003.metrics-resource.txt"},
		{"/stats/summary?only_cpu_and_memory=true", "seed-003.stats-summary.json"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", c.url, nil))
		got := rec.Body.String()
		if c.url == "/metrics" {
			var keep []string
			for _, l := range strings.Split(got, "\n") {
				if !volatile.MatchString(l) {
					keep = append(keep, l)
				}
			}
			got = strings.Join(keep, "\n")
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
