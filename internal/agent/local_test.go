package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"

	"github.com/cgwarden/cgwarden/internal/answerproof"
	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/serve"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// JWT-shaped tokens the fake API server knows.
const (
	adminToken       = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.c2ln"
	readerToken      = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJyZWFkZXIifQ.c2ln"
	otherNodeToken   = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJvdGhlciJ9.c2ln"
	otherReaderToken = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ0ZW5hbnQifQ.c2ln"
)

// fakeAPI is the API server's part: it knows an admin's token (the API
// server's audience, allowed get on nodes/stats), reader tokens for the
// reader audience (bound to the agent's node, to another node, or of
// another ServiceAccount), and mints answer tokens.
type fakeAPI struct{ minted []string }

func bound(user, node string) authnv1.UserInfo {
	return authnv1.UserInfo{Username: user, Extra: map[string]authnv1.ExtraValue{"authentication.kubernetes.io/node-name": {node}}}
}

func (*fakeAPI) Authenticate(_ context.Context, token, audience string) (authnv1.UserInfo, bool, error) {
	reader := answerproof.ServiceAccountUser("cgwarden-system", answerproof.DefaultReader)
	switch {
	case audience == "" && token == adminToken:
		return authnv1.UserInfo{Username: "admin"}, true, nil
	case audience != answerproof.ReaderAudience:
		return authnv1.UserInfo{}, false, nil
	case token == readerToken:
		return bound(reader, "k3s-node"), true, nil
	case token == otherNodeToken:
		return bound(reader, "k3s-node-2"), true, nil
	case token == otherReaderToken:
		return bound(answerproof.ServiceAccountUser("cgwarden-system", "tenant"), "k3s-node"), true, nil
	}
	return authnv1.UserInfo{}, false, nil
}

func (*fakeAPI) Authorize(_ context.Context, u authnv1.UserInfo, _, sub string) (bool, string, error) {
	return u.Username == "admin" && sub == "stats", "", nil
}

func (f *fakeAPI) Mint(_ context.Context, audience string) (string, error) {
	f.minted = append(f.minted, audience)
	if strings.Contains(audience, "fail") {
		return "", errors.New("refused")
	}
	return "answer-for:" + audience, nil
}

// With --authenticate, the loopback listener (--local-listen) takes only
// the reader's tokens for its audience bound to the agent's own node (an
// admin's token that --listen takes is refused there), signs each
// answer to a challenge with a token minted for that answer, and leaves
// health open.
func TestLocalListenTakesOnlyTheReader(t *testing.T) {
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
	api := &fakeAPI{}
	reader := answerproof.ServiceAccountUser("cgwarden-system", answerproof.DefaultReader)
	a := &Agent{cfg: &Config{Options: Options{Listen: "127.0.0.1:0", LocalListen: "127.0.0.1:0"}}, Server: s, log: slog.New(slog.DiscardHandler),
		auth: &serve.Auth{Reviewer: api, Node: "k3s-node"},
		localAuth: &serve.Auth{Reviewer: api, Node: "k3s-node", Audience: answerproof.ReaderAudience,
			Permit: func(u authnv1.UserInfo) error { return answerproof.CheckReader(u, reader, "k3s-node") }},
		minter: api}
	eps := a.endpoints()
	if len(eps) != 2 {
		t.Fatalf("%d endpoints, want 2", len(eps))
	}
	challenge, err := answerproof.NewChallenge()
	if err != nil {
		t.Fatal(err)
	}
	get := func(ep int, path, token, challenge string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		if challenge != "" {
			r.Header.Set(answerproof.ChallengeHeader, challenge)
		}
		w := httptest.NewRecorder()
		eps[ep].Handler.ServeHTTP(w, r)
		return w
	}
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/audit", "", 401}, {"/inspect", "", 401}, {"/audit", "eyJh.eyJz.b3RoZXI", 401},
		{"/audit", adminToken, 401}, // the API server's audience: not the reader's
		{"/audit", otherNodeToken, 403}, {"/inspect", otherReaderToken, 403},
		{"/audit", readerToken, 200}, {"/inspect", readerToken, 200}, {"/healthz", "", 200}, {"/readyz", "", 200},
	} {
		if w := get(1, c.path, c.token, ""); w.Code != c.want {
			t.Errorf("--local-listen GET %s with token %q: %d, want %d: %s", c.path, c.token, w.Code, c.want, w.Body)
		}
	}
	if w := get(0, "/audit", adminToken, ""); w.Code != 200 {
		t.Errorf("--listen GET /audit with the admin's token: %d, want 200", w.Code)
	}
	if len(api.minted) != 0 {
		t.Errorf("answers signed without a challenge: %q", api.minted)
	}
	w := get(1, "/audit?x=1", readerToken, challenge)
	want := answerproof.AnswerAudience(challenge, "/audit?x=1", w.Body.Bytes())
	if w.Code != 200 || w.Header().Get(answerproof.AnswerHeader) != "answer-for:"+want {
		t.Errorf("a challenged answer: %d, %s %q, want the token for %s", w.Code, answerproof.AnswerHeader, w.Header().Get(answerproof.AnswerHeader), want)
	}
	if w := get(1, "/audit", otherNodeToken, challenge); w.Code != 403 || w.Header().Get(answerproof.AnswerHeader) != "" || len(api.minted) != 1 {
		t.Errorf("a refused request got %d, answer token %q, %d minted: nothing may be signed for it", w.Code, w.Header().Get(answerproof.AnswerHeader), len(api.minted))
	}
	if w := get(1, "/audit", readerToken, "short"); w.Code != 400 {
		t.Errorf("a malformed challenge: %d, want 400", w.Code)
	}
}
