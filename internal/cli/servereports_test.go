package cli

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/cgwarden/cgwarden/internal/serve"
)

// The agent's /audit and /inspect are what `cgwarden audit -o json` and
// `cgwarden inspect -o json` write for the same scan: a snapshot served by
// serve (as the agent serves its scan) and read by the commands.
func TestServeReportsAreTheCommandsJSON(t *testing.T) {
	// serve measures demand only with --demand, for snapshots too: inspect
	// is asked the same.
	for _, demand := range []bool{false, true} {
		t.Run(fmt.Sprintf("demand=%v", demand), func(t *testing.T) { serveReportsAreTheCommandsJSON(t, demand) })
	}
}

func serveReportsAreTheCommandsJSON(t *testing.T, demand bool) {
	const snap = "example:seed-003-k3s-spin"
	s := serve.New(serve.Config{NodeName: "k3s-node", Demand: demand})
	if err := feedSnapshot(t.Context(), s, snap, nil, ""); err != nil {
		t.Fatal(err)
	}
	var inspectFlags []string
	if demand {
		inspectFlags = []string{"--demand"}
	}
	for _, c := range []struct {
		path, cmd string
		flags     []string
	}{{"/audit", "audit", nil}, {"/inspect", "inspect", inspectFlags}} {
		for _, h := range []struct {
			name string
			get  func() *httptest.ResponseRecorder
		}{
			{"--listen", func() *httptest.ResponseRecorder {
				w := httptest.NewRecorder()
				s.Handler().ServeHTTP(w, httptest.NewRequest("GET", c.path, nil))
				return w
			}},
			{"--local-listen", func() *httptest.ResponseRecorder {
				w := httptest.NewRecorder()
				s.LocalHandler().ServeHTTP(w, httptest.NewRequest("GET", c.path, nil))
				return w
			}},
		} {
			w := h.get()
			if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("%s GET %s: %d %s: %.300s", h.name, c.path, w.Code, w.Header().Get("Content-Type"), w.Body.String())
			}
			out, stderr, code := run(append([]string{c.cmd, "--snapshot", snap, "-o", "json"}, c.flags...)...)
			if code > 1 { // audit exits 1 for findings at or above --fail-on
				t.Fatalf("cgwarden %s: exit %d: %s", c.cmd, code, stderr)
			}
			var served, written any
			if err := json.Unmarshal(w.Body.Bytes(), &served); err != nil {
				t.Fatalf("%s: %v", c.path, err)
			}
			if err := json.Unmarshal([]byte(out), &written); err != nil {
				t.Fatalf("cgwarden %s -o json: %v", c.cmd, err)
			}
			if !reflect.DeepEqual(served, written) {
				t.Errorf("%s GET %s differs from cgwarden %s -o json on the same snapshot:\nserved:  %.600s\nwritten: %.600s", h.name, c.path, c.cmd, w.Body.String(), out)
			}
			if err := validate(t, schemas(t)[c.cmd], c.path, w.Body.Bytes()); err != nil {
				t.Errorf("%s does not match docs/schemas/%s.schema.json: %v", c.path, c.cmd, err)
			}
		}
	}
}
