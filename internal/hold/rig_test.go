package hold_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cgwarden/cgwarden/internal/agent"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// The holder and the adopter are tested as `serve --fix` runs them: in
// the agent (internal/agent), whose one node loop offers them its scans,
// whose one inotify Hub they watch through, and whose one applier makes
// their writes. This external test package may import the agent, which
// imports hold: there is no second wiring to drift from production's.

// weightRules are the rules the holder holds (`serve --fix` with both).
var weightRules = []string{rules.SizeBlindWeights, rules.BestEffortStarvation}

// fixOptions are the options of `serve --fix rules...` on the scratch
// cgroup base, its pods from lister, its journal in journalDir. The
// pods' size annotations count as --trust-size-annotations=default says
// (no API server here: sizetrust).
func fixOptions(base string, lister metadata.Lister, journalDir string, rules ...string) *agent.Options {
	return &agent.Options{Listen: "127.0.0.1:0", Interval: time.Second, Fix: rules, JournalDir: journalDir,
		HostRoot: "/", Base: base, Lister: lister, TrustSizes: "default", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// startAgent completes and starts an agent of o. halt stops its loop
// and fixers and waits for them (its /metrics can still be read); the
// test's end halts it if the test did not, and closes it.
func startAgent(t testing.TB, o *agent.Options) (a *agent.Agent, halt func()) {
	t.Helper()
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	a, err = cfg.Complete(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	halt = sync.OnceFunc(a.Start(context.Background()))
	t.Cleanup(halt)
	return a, halt
}

// pods is the agent's pod source: the pods the test sets. It counts its
// listings (each is a read of the pods' sizes).
type pods struct {
	mu    sync.Mutex
	list  []metadata.Pod
	calls int
}

func (p *pods) Pods(context.Context) ([]metadata.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	return p.list, nil
}

// set makes list the pods (a new slice: the agent's metadata notices).
func (p *pods) set(list []metadata.Pod) {
	p.mu.Lock()
	p.list = list
	p.mu.Unlock()
}

func (p *pods) listings() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// notifyingPods are pods that say when they change, as the Kubernetes
// source's informer does: the agent's holder then reads the sizes only
// when told (hold.NoCheck), or from the scans its loop offers.
type notifyingPods struct {
	*pods
	changes *metadata.Changes
}

func (n notifyingPods) Changes() *metadata.Changes { return n.changes }

// scrape reads the agent's /metrics.
func scrape(t testing.TB, a *agent.Agent) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	a.Server.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return mfs
}

// metric is the value of the agent's series name with labels (a subset
// of its labels); ok is false when it serves none.
func metric(t testing.TB, a *agent.Agent, name string, labels map[string]string) (v float64, ok bool) {
	t.Helper()
	mf := scrape(t, a)[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		for k, v := range labels {
			if !hasLabel(m, k, v) {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// planned reports whether the agent's holder has applied a plan and
// watches its targets (it counts the plan after the watches are on).
func planned(t testing.TB, a *agent.Agent) bool {
	n, ok := metric(t, a, "cgwarden_weight_replans_total", nil)
	return ok && n >= 1
}

// journalEntries reads the journal in dir as the agent's holder does
// (without its lock).
func journalEntries(t testing.TB, dir string) []journal.Entry {
	t.Helper()
	j := journal.New(dir)
	defer j.Close()
	e, err := j.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return e
}
