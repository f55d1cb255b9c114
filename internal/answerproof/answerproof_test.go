package answerproof

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
)

// The answer's audience changes with each of challenge, path and body,
// and is not fooled by moving bytes between them.
func TestAnswerAudienceBindsAll(t *testing.T) {
	c1, err := NewChallenge()
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := NewChallenge()
	if c1 == c2 || CheckChallenge(c1) != nil {
		t.Fatalf("challenges %q %q", c1, c2)
	}
	base := AnswerAudience(c1, "/audit", []byte("{}"))
	for name, other := range map[string]string{
		"challenge": AnswerAudience(c2, "/audit", []byte("{}")),
		"path":      AnswerAudience(c1, "/inspect", []byte("{}")),
		"body":      AnswerAudience(c1, "/audit", []byte("{ }")),
		"shifted":   AnswerAudience(c1, "/audit{", []byte("}")),
	} {
		if other == base {
			t.Errorf("another %s, same audience %s", name, base)
		}
	}
	if !strings.HasPrefix(base, answerAudiencePrefix) || base != AnswerAudience(c1, "/audit", []byte("{}")) {
		t.Errorf("audience %q not stable or without its prefix", base)
	}
	for _, bad := range []string{"", "short", c1 + "A", strings.Repeat("=", 43), c1[:42] + "+"} {
		if CheckChallenge(bad) == nil {
			t.Errorf("challenge %q accepted", bad)
		}
	}
}

func TestCheckBound(t *testing.T) {
	p := Pod{Namespace: "cgwarden-system", Name: "cgwarden-a", UID: "u1", ServiceAccount: "cgwarden"}
	user := ServiceAccountUser(p.Namespace, p.ServiceAccount)
	ok := authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"aud"}, User: authnv1.UserInfo{Username: user,
		Extra: map[string]authnv1.ExtraValue{extraPodName: {"cgwarden-a"}, extraPodUID: {"u1"}}}}
	if err := CheckBound(ok, "aud", user, p); err != nil {
		t.Fatalf("the agent's own token: %v", err)
	}
	for name, c := range map[string]struct {
		change func(*authnv1.TokenReviewStatus)
		want   string
	}{
		"refused":        {func(s *authnv1.TokenReviewStatus) { s.Authenticated, s.Error = false, "expired" }, "does not accept it: expired"},
		"other audience": {func(s *authnv1.TokenReviewStatus) { s.Audiences = []string{"api"} }, "not for audience aud"},
		"other user":     {func(s *authnv1.TokenReviewStatus) { s.User.Username = "system:serviceaccount:x:y" }, "not " + user},
		"unbound":        {func(s *authnv1.TokenReviewStatus) { s.User.Extra = nil }, "bound to no pod"},
		"other pod": {func(s *authnv1.TokenReviewStatus) {
			s.User.Extra = map[string]authnv1.ExtraValue{extraPodName: {"squat"}, extraPodUID: {"u9"}}
		}, "bound to pod squat"},
		"same name, new uid": {func(s *authnv1.TokenReviewStatus) {
			s.User.Extra = map[string]authnv1.ExtraValue{extraPodName: {"cgwarden-a"}, extraPodUID: {"u0"}}
		}, "uid u0"},
	} {
		st := ok
		st.User.Extra = map[string]authnv1.ExtraValue{extraPodName: {"cgwarden-a"}, extraPodUID: {"u1"}}
		c.change(&st)
		if err := CheckBound(st, "aud", user, p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
}

func TestCheckReader(t *testing.T) {
	reader := ServiceAccountUser("cgwarden-system", DefaultReader)
	u := func(name string, node ...string) authnv1.UserInfo {
		x := map[string]authnv1.ExtraValue{}
		if len(node) > 0 {
			x[extraNodeName] = node
		}
		return authnv1.UserInfo{Username: name, Extra: x}
	}
	if err := CheckReader(u(reader, "n1"), reader, "n1"); err != nil {
		t.Fatalf("the reader's token for n1: %v", err)
	}
	for name, c := range map[string]struct {
		u    authnv1.UserInfo
		want string
	}{
		"admin":     {u("admin", "n1"), "admin's, not"},
		"unbound":   {u(reader), "bound to no node"},
		"other":     {u(reader, "n2"), "bound to node n2, not n1"},
		"two nodes": {u(reader, "n1", "n2"), "bound to node n1,n2"},
	} {
		if err := CheckReader(c.u, reader, "n1"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

type mintFunc func(context.Context, string) (string, error)

func (f mintFunc) Mint(ctx context.Context, aud string) (string, error) { return f(ctx, aud) }

// Sign signs a challenged 200 for its exact body, passes other answers
// unsigned, and turns a 200 it cannot sign into a 503.
func TestSign(t *testing.T) {
	var minted []string
	fail := false
	m := mintFunc(func(_ context.Context, aud string) (string, error) {
		minted = append(minted, aud)
		if fail {
			return "", errors.New("forbidden")
		}
		return "tok:" + aud, nil
	})
	h := Sign(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"a":`)
		_, _ = io.WriteString(w, `1}`)
	}), m, slog.New(slog.DiscardHandler))
	c, _ := NewChallenge()
	do := func(path, challenge string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		if challenge != "" {
			r.Header.Set(ChallengeHeader, challenge)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	w := do("/audit", c)
	if got, want := w.Header().Get(AnswerHeader), "tok:"+AnswerAudience(c, "/audit", []byte(`{"a":1}`)); w.Code != 200 || got != want || w.Body.String() != `{"a":1}` || w.Header().Get("Content-Type") != "application/json" {
		t.Errorf("signed answer: %d %q %q %v, want the token %q", w.Code, w.Body, got, w.Header(), want)
	}
	if w := do("/audit", ""); w.Header().Get(AnswerHeader) != "" || w.Code != 200 {
		t.Errorf("unchallenged: %d %q", w.Code, w.Header().Get(AnswerHeader))
	}
	if w := do("/missing", c); w.Code != 404 || w.Header().Get(AnswerHeader) != "" {
		t.Errorf("a 404: %d %q", w.Code, w.Header().Get(AnswerHeader))
	}
	if n := len(minted); n != 1 {
		t.Errorf("%d tokens minted, want 1 (the one 200 with a challenge)", n)
	}
	fail = true
	if w := do("/audit", c); w.Code != http.StatusServiceUnavailable || w.Header().Get(AnswerHeader) != "" || strings.Contains(w.Body.String(), `"a"`) {
		t.Errorf("unsignable: %d %q %q, want a 503 without the answer", w.Code, w.Header().Get(AnswerHeader), w.Body)
	}
}

// FuzzCheckChallenge: any header value is refused or is exactly 32 bytes.
func FuzzCheckChallenge(f *testing.F) {
	c, _ := NewChallenge()
	for _, s := range []string{c, "", "====", "A", strings.Repeat("A", 43)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckChallenge(s) == nil && len(s) != 43 {
			t.Errorf("accepted %q (%d characters)", s, len(s))
		}
	})
}
