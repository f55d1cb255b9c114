package kubectlplugin

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/answerproof"
)

// fakeProver mints "reader-for-NODE" and accepts an answer token only if
// it is "signed:" + the answer's audience.
type fakeProver struct{ refuse bool }

func (f fakeProver) ReaderToken(_ context.Context, a Agent) (string, error) {
	if f.refuse {
		return "", errors.New("forbidden")
	}
	return "reader-for-" + a.Node, nil
}

func (fakeProver) Verify(_ context.Context, _ Agent, challenge, path string, body []byte, token string) error {
	if token != "signed:"+answerproof.AnswerAudience(challenge, path, body) {
		return fmt.Errorf("token %q is not for this answer", token)
	}
	return nil
}

// fetch sends the agent's reader token and a challenge, never anything
// else of the user's, takes an answer signed for its body, and refuses
// (naming the node and port) an answer that is not signed, is signed for
// another body, or comes from an agent whose token could not be had.
func TestFetchProvesTheAnswer(t *testing.T) {
	var got []http.Header
	agent := func(sign func(challenge, path string, body []byte) string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = append(got, r.Header.Clone())
			body := []byte(`{"findings":[]}`)
			if tok := sign(r.Header.Get(answerproof.ChallengeHeader), r.URL.RequestURI(), body); tok != "" {
				w.Header().Set(answerproof.AnswerHeader, tok)
			}
			_, _ = w.Write(body)
		}))
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	addr := map[string]string{
		"real":   agent(func(c, p string, b []byte) string { return "signed:" + answerproof.AnswerAudience(c, p, b) }),
		"squat":  agent(func(string, string, []byte) string { return "" }),
		"replay": agent(func(c, p string, _ []byte) string { return "signed:" + answerproof.AnswerAudience(c, p, []byte(`{}`)) }),
	}
	op := Direct{Addr: func(a Agent) string { return addr[a.Node] }}
	agents := []Agent{{Node: "real", Namespace: "cgwarden-system", Pod: "cgwarden-r"}, {Node: "squat", Namespace: "cgwarden-system", Pod: "cgwarden-s"}, {Node: "replay", Namespace: "cgwarden-system", Pod: "cgwarden-p"}}
	res := FetchAll(context.Background(), agents, op, FetchOptions{Path: "/audit", Prover: fakeProver{}, Parallel: 1, Timeout: 10 * time.Second, Port: 9531})
	if res[0].Err != nil || string(res[0].Body) != `{"findings":[]}` {
		t.Errorf("the real agent: %v %q", res[0].Err, res[0].Body)
	}
	for _, r := range res[1:] {
		var ie *ImpostorError
		if !errors.As(r.Err, &ie) || r.Body != nil || !strings.Contains(r.Err.Error(), "port 9531 of pod cgwarden-system/"+r.Pod) || !strings.Contains(r.Err.Error(), "of node "+r.Node) {
			t.Errorf("%s: %v (body %q), want an ImpostorError naming the pod, port and node, and no body", r.Node, r.Err, r.Body)
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	for i, h := range got {
		if a := h.Get("Authorization"); a != "Bearer reader-for-"+agents[i].Node {
			t.Errorf("request %d: Authorization %q, want the reader token of node %s", i, a, agents[i].Node)
		}
		if answerproof.CheckChallenge(h.Get(answerproof.ChallengeHeader)) != nil {
			t.Errorf("request %d: challenge %q", i, h.Get(answerproof.ChallengeHeader))
		}
	}
	if got[0].Get(answerproof.ChallengeHeader) == got[1].Get(answerproof.ChallengeHeader) {
		t.Error("two requests with one challenge")
	}
	got = nil
	res = FetchAll(context.Background(), agents[:1], op, FetchOptions{Path: "/audit", Prover: fakeProver{refuse: true}, Parallel: 1, Timeout: 10 * time.Second})
	if res[0].Err == nil || len(got) != 0 {
		t.Errorf("no reader token: %v, %d requests sent, want an error and none", res[0].Err, len(got))
	}
}

// A gzipped answer is checked as sent (its token is for the compressed
// bytes) and shown decompressed.
func TestFetchChecksGzippedAnswersAsSent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Encoding") != "gzip" {
			t.Errorf("Accept-Encoding %q", r.Header.Get("Accept-Encoding"))
		}
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write([]byte(`{"pods":[]}`))
		_ = zw.Close()
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set(answerproof.AnswerHeader, "signed:"+answerproof.AnswerAudience(r.Header.Get(answerproof.ChallengeHeader), r.URL.RequestURI(), b.Bytes()))
		_, _ = w.Write(b.Bytes())
	}))
	defer srv.Close()
	op := Direct{Addr: func(Agent) string { return srv.Listener.Addr().String() }}
	res := FetchAll(context.Background(), []Agent{{Node: "n"}}, op, FetchOptions{Path: "/inspect", Prover: fakeProver{}, Parallel: 1, Timeout: 10 * time.Second})
	if res[0].Err != nil || string(res[0].Body) != `{"pods":[]}` {
		t.Errorf("%v %q", res[0].Err, res[0].Body)
	}
}
