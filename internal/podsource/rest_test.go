package podsource

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// apiServer answers the two requests a pods informer makes, in the API
// server's wire format: a PodList, then a watch stream of JSON events.
type apiServer struct {
	mu        sync.Mutex
	selectors []string
	auth      []string
	// impersonate is each request's Impersonate-User; refuseNode answers
	// a request that acts as someone else 403, as an API server before
	// constrained impersonation (or without the grant) does.
	impersonate []string
	refuseNode  bool
	watchPod    *corev1.Pod
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/pods" {
		http.NotFound(w, r)
		return
	}
	a.mu.Lock()
	a.selectors = append(a.selectors, r.URL.Query().Get("fieldSelector"))
	a.auth = append(a.auth, r.Header.Get("Authorization"))
	a.impersonate = append(a.impersonate, r.Header.Get("Impersonate-User"))
	refuse := a.refuseNode && r.Header.Get("Impersonate-User") != ""
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if refuse {
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden, Message: `users "system:node:node-a" is forbidden: cannot impersonate`})
		return
	}
	if r.URL.Query().Get("watch") == "true" {
		fl := w.(http.Flusher)
		ev := map[string]any{"type": "ADDED", "object": a.watchPod}
		_ = json.NewEncoder(w).Encode(ev)
		fl.Flush()
		<-r.Context().Done()
		return
	}
	list := corev1.PodList{
		TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: "10"},
		Items:    []corev1.Pod{*apiPod("spin-test", spinUID, "node-a", spinCtr)},
	}
	_ = json.NewEncoder(w).Encode(list)
}

func TestKubernetesOverRESTWithKubeconfig(t *testing.T) {
	for _, c := range []struct {
		name       string
		refuseNode bool
		want       string // every informer request's Impersonate-User
	}{
		{"acting as the node", false, "system:node:node-a"},
		{"as itself, acting as the node refused", true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := podsOverREST(t, c.refuseNode)
			// The first request is as the node; when refused, it is made
			// again as the agent itself, which is asked first from then on.
			got := api.impersonate
			if c.refuseNode {
				if len(got) < 3 || got[0] != "system:node:node-a" {
					t.Fatalf("requests' Impersonate-User %q: want the first as the node (refused), then a list and a watch as itself", got)
				}
				got = got[1:]
			}
			if len(got) < 2 {
				t.Fatalf("requests' Impersonate-User %q: want a list and a watch", api.impersonate)
			}
			for i, u := range got {
				if u != c.want {
					t.Errorf("request %d: Impersonate-User %q, want %q (all: %q)", i, u, c.want, api.impersonate)
				}
			}
		})
	}
}

// podsOverREST runs the Kubernetes source against the fake API server
// until it has both pods, checks every request's selector and
// credential, and returns the server.
func podsOverREST(t *testing.T, refuseNode bool) *apiServer {
	t.Helper()
	late := apiPod("late", "11111111-2222-3333-4444-555555555555", "node-a", "abc")
	late.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
	late.ResourceVersion = "11"
	api := &apiServer{watchPod: late, refuseNode: refuseNode}
	// TLS: client-go sends no credentials to a plain-HTTP server.
	srv := httptest.NewTLSServer(api)
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: secret-token}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, name, err := Open(ctx, Config{Mode: Kubernetes, Kubeconfig: kubeconfig, NodeName: "node-a", SyncTimeout: 10 * time.Second}, slog.New(slog.DiscardHandler))
	if err != nil || name != Kubernetes {
		t.Fatal(name, err)
	}
	poll.Every(20*time.Millisecond).Until(t, 10*time.Second, "list and watch giving 2 pods", func() (bool, string, error) {
		pods, err := l.Pods(ctx)
		return len(pods) == 2, fmt.Sprintf("%d pods: %+v", len(pods), pods), err
	})
	cancel()
	api.mu.Lock()
	defer api.mu.Unlock()
	for i, sel := range api.selectors {
		if sel != "spec.nodeName=node-a" || api.auth[i] != "Bearer secret-token" {
			t.Errorf("request %d: fieldSelector %q, Authorization %q", i, sel, api.auth[i])
		}
	}
	return api
}
