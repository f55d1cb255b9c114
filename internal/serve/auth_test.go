package serve

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
)

// jwt is a token shaped like a JWT (header, payload, signature) whose
// payload is name: what the fake reviewers recognise.
func jwt(name string) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(`{"alg":"RS256"}`)) + "." + enc.EncodeToString([]byte(name)) + ".c2lnbmF0dXJl"
}

// tokenName is the payload of a jwt token, "" for another token.
func tokenName(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	b, _ := base64.RawURLEncoding.DecodeString(parts[1])
	return string(b)
}

// fakeReviewer knows two tokens: "reader" may get nodes/metrics of node
// "n1" but not nodes/stats, "nobody" may get nothing. It counts calls.
type fakeReviewer struct {
	authn, authz int
	down         bool
}

func (f *fakeReviewer) Authenticate(_ context.Context, token, _ string) (authnv1.UserInfo, bool, error) {
	f.authn++
	if f.down {
		return authnv1.UserInfo{}, false, errors.New("connection refused")
	}
	switch name := tokenName(token); name {
	case "reader", "nobody":
		return authnv1.UserInfo{Username: "system:serviceaccount:x:" + name}, true, nil
	}
	return authnv1.UserInfo{}, false, nil
}

func (f *fakeReviewer) Authorize(_ context.Context, u authnv1.UserInfo, node, sub string) (bool, string, error) {
	f.authz++
	if u.Username == "system:serviceaccount:x:reader" && node == "n1" && sub == "metrics" {
		return true, "", nil
	}
	return false, "no RBAC rule", nil
}

func TestAuthLikeTheKubelet(t *testing.T) {
	rv := &fakeReviewer{}
	now := time.Unix(1000, 0)
	a := &Auth{Reviewer: rv, Node: "n1", Now: func() time.Time { return now }}
	h := a.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	do := func(path, token string) int {
		r := httptest.NewRequest("GET", path, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+jwt(token))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", 200}, {"/readyz", "", 200},
		{"/metrics/resource", "", 401}, {"/metrics", "garbage", 401}, {"/stats/summary", "garbage", 401},
		{"/metrics/resource", "reader", 200}, {"/metrics", "reader", 200}, {"/stats/summary", "reader", 403},
		{"/metrics/resource", "nobody", 403},
	} {
		if got := do(c.path, c.token); got != c.want {
			t.Errorf("GET %s with token %q: %d, want %d", c.path, c.token, got, c.want)
		}
	}
	// Decisions are cached: the same requests again ask the API server
	// nothing.
	n, z := rv.authn, rv.authz
	do("/metrics/resource", "reader")
	do("/stats/summary", "reader")
	if rv.authn != n || rv.authz != z {
		t.Errorf("cached decisions asked again: %d→%d token reviews, %d→%d access reviews", n, rv.authn, z, rv.authz)
	}
	// A denial is cached for 30 s, an allowance for 5 min.
	now = now.Add(time.Minute)
	do("/stats/summary", "reader")
	do("/metrics/resource", "reader")
	if rv.authz != z+1 {
		t.Errorf("after a minute: %d access reviews, want %d (the denial expired, the allowance did not)", rv.authz, z+1)
	}
	// The API server down: 503, never a silent allow.
	rv.down = true
	if got := do("/metrics", "newtoken"); got != http.StatusServiceUnavailable {
		t.Errorf("API server down: %d, want 503", got)
	}
}

// statsReviewer allows "stats" get on nodes/stats of node "n1" and nothing
// else; "metrics" may get nodes/metrics only.
type statsReviewer struct{}

func (statsReviewer) Authenticate(_ context.Context, token, _ string) (authnv1.UserInfo, bool, error) {
	if name := tokenName(token); name == "stats" || name == "metrics" {
		return authnv1.UserInfo{Username: name}, true, nil
	}
	return authnv1.UserInfo{}, false, nil
}

func (statsReviewer) Authorize(_ context.Context, u authnv1.UserInfo, node, sub string) (bool, string, error) {
	return node == "n1" && u.Username == sub, "", nil
}

// The audit and the inventory are for readers of nodes/stats (what
// /stats/summary needs), not of nodes/metrics: 401 without a token or with
// a bad one, 403 for a metrics reader, 200 for a stats reader.
func TestAuthReportsNeedNodesStats(t *testing.T) {
	s := feedExample(t, "seed-003-k3s-spin", nil)
	h := (&Auth{Reviewer: statsReviewer{}, Node: "n1"}).Wrap(s.Handler())
	for _, path := range []string{"/audit", "/inspect"} {
		for _, c := range []struct {
			token string
			want  int
		}{{"", 401}, {"garbage", 401}, {"metrics", 403}, {"stats", 200}} {
			r := httptest.NewRequest("GET", path, nil)
			if c.token != "" {
				r.Header.Set("Authorization", "Bearer "+jwt(c.token))
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.want {
				t.Errorf("GET %s with token %q: %d, want %d: %.200s", path, c.token, w.Code, c.want, w.Body.String())
			}
		}
	}
}

// The loopback listener serves the reports and health only: the
// kubelet-format and Prometheus endpoints, which have no token check
// there, are not found.
func TestLocalHandlerServesReportsOnly(t *testing.T) {
	s := feedExample(t, "seed-003-k3s-spin", nil)
	for path, want := range map[string]int{"/audit": 200, "/inspect": 200, "/healthz": 200, "/readyz": 200,
		"/metrics/resource": 404, "/stats/summary": 404, "/metrics": 404} {
		if code, body, _ := get(t, s.LocalHandler(), path); code != want {
			t.Errorf("local GET %s: %d, want %d: %.200s", path, code, want, body)
		}
	}
}

func TestCheckLocalListen(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:9531": true, "[::1]:9531": true,
		"0.0.0.0:9531": false, ":9531": false, "localhost:9531": false, "10.0.0.1:9531": false, "127.0.0.1": false, "127.0.0.1:x": false} {
		if err := CheckLocalListen(addr); (err == nil) != ok {
			t.Errorf("CheckLocalListen(%q): %v, want ok=%v", addr, err, ok)
		}
	}
}
