package kubectlplugin

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/serve"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// agentBody is what an agent serving an embedded snapshot (named by its
// pods file, as `serve --snapshot X --pods X.pods.json` does) answers on
// path.
func agentBody(t *testing.T, name, path string) []byte {
	t.Helper()
	b, ok := examples.Open(name)
	if !ok {
		t.Fatalf("no example %s", name)
	}
	snap, err := snapshot.Load(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	pods, err := metadata.ReadPodsFile(filepath.Join("..", "examples", "snapshots", name+".pods.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := serve.New(serve.Config{NodeName: name})
	if err := s.FeedSamples(snap.Samples, metadata.NewSet(pods)); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	s.LocalHandler().ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	if w.Code != 200 {
		t.Fatalf("%s %s: %d %s", name, path, w.Code, w.Body.String())
	}
	return w.Body.Bytes()
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update, then review the diff):\n%s", p, got)
	}
}

// Two nodes (two embedded snapshots served as their agents would serve
// them) and one that could not be read, as one table and one document.
func TestClusterTables(t *testing.T) {
	nodes := []string{"cgroupfs-v1-containerd", "seed-003-k3s-spin"}
	for _, k := range []kind{auditKind, inspectKind} {
		for _, c := range []struct {
			name string
			sel  selection
		}{{"all", selection{all: true}}, {"default", selection{namespace: "default"}}} {
			var results []Result
			for _, n := range nodes {
				results = append(results, Result{Agent: Agent{Node: n, Namespace: "cgwarden-system", Pod: "cgwarden-" + n[:4]}, Body: agentBody(t, n, k.path)})
			}
			results = append(results, Result{Agent: Agent{Node: "down", Namespace: "cgwarden-system", Pod: "cgwarden-down"}, Err: errString("GET /audit: connection refused")})
			for _, out := range []string{"table", "json"} {
				o := &Options{Output: out}
				doc, failed := o.render(results, c.sel, k)
				if failed != 1 {
					t.Errorf("%d failed nodes, want 1", failed)
				}
				var b bytes.Buffer
				if err := o.write(&b, doc, k); err != nil {
					t.Fatal(err)
				}
				golden(t, k.name+"-"+c.name+"."+out, b.Bytes())
			}
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// With a namespace selected, only that namespace's findings are kept,
// the counts follow, and what is kept is the agent's JSON as sent: over
// the namespaces of the example's pods, every finding about a pod is kept
// once.
func TestSelectionKeepsTheAgentsJSON(t *testing.T) {
	body := agentBody(t, "cgroupfs-v1-containerd", "/audit")
	var all struct {
		Findings []finding `json:"findings"`
	}
	if err := json.Unmarshal(body, &all); err != nil {
		t.Fatal(err)
	}
	sent := map[string]bool{}
	var raw struct {
		Findings []json.RawMessage `json:"findings"`
	}
	_ = json.Unmarshal(body, &raw)
	for _, f := range raw.Findings {
		sent[string(f)] = true
	}
	kept := 0
	for _, ns := range []string{"default", "kube-system", "db"} {
		sel, rows, err := selectAudit(body, selection{namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Counts   map[string]int    `json:"counts"`
			Findings []json.RawMessage `json:"findings"`
		}
		if err := json.Unmarshal(sel, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Findings) != len(rows) || got.Counts["error"]+got.Counts["warning"]+got.Counts["info"] != len(rows) {
			t.Errorf("-n %s: %d findings, %d rows, counts %v", ns, len(got.Findings), len(rows), got.Counts)
		}
		for i, f := range got.Findings {
			if !sent[string(f)] {
				t.Errorf("-n %s: finding %d is not one the agent sent: %s", ns, i, f)
			}
			if rows[i].Subject.Namespace != ns {
				t.Errorf("-n %s: finding %d is about %s", ns, i, rows[i].Subject)
			}
		}
		kept += len(rows)
	}
	onPods := 0
	for _, f := range all.Findings {
		if f.Subject.PodUID != "" || f.Subject.PodName != "" {
			onPods++
		}
	}
	if kept != onPods || onPods == 0 {
		t.Errorf("kept %d findings over the namespaces, want the %d about pods", kept, onPods)
	}
}
