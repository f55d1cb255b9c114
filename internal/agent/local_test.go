package agent

import (
	"bytes"
	"context"
	"net/http/httptest"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/serve"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// oneUser accepts one token, of a user who may get nodes/stats.
type oneUser struct{ token string }

func (o oneUser) Authenticate(_ context.Context, token string) (authnv1.UserInfo, bool, error) {
	return authnv1.UserInfo{Username: "admin"}, token == o.token, nil
}

func (oneUser) Authorize(_ context.Context, u authnv1.UserInfo, _, sub string) (bool, string, error) {
	return u.Username == "admin" && sub == "stats", "", nil
}

// With --authenticate, the loopback listener (--local-listen) checks a
// bearer token as the main one does; its health stays open.
func TestLocalListenBehindAuth(t *testing.T) {
	b, ok := examples.Open("seed-003-k3s-spin")
	if !ok {
		t.Fatal("no embedded seed-003-k3s-spin")
	}
	snap, err := snapshot.Load(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	s := serve.New(serve.Config{NodeName: "k3s-node"})
	if err := s.FeedSamples(snap.Samples, nil); err != nil {
		t.Fatal(err)
	}
	const token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.c2ln"
	a := &Agent{cfg: &Config{Options: Options{Listen: "127.0.0.1:0", LocalListen: "127.0.0.1:0"}}, Server: s,
		auth: &serve.Auth{Reviewer: oneUser{token}, Node: "k3s-node"}}
	eps := a.endpoints()
	if len(eps) != 2 {
		t.Fatalf("%d endpoints, want 2", len(eps))
	}
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/audit", "", 401}, {"/inspect", "", 401}, {"/audit", "eyJh.eyJz.b3RoZXI", 401},
		{"/audit", token, 200}, {"/inspect", token, 200}, {"/healthz", "", 200}, {"/readyz", "", 200},
	} {
		r := httptest.NewRequest("GET", c.path, nil)
		if c.token != "" {
			r.Header.Set("Authorization", "Bearer "+c.token)
		}
		w := httptest.NewRecorder()
		eps[1].Handler.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("--local-listen GET %s with token %q: %d, want %d", c.path, c.token, w.Code, c.want)
		}
	}
}
