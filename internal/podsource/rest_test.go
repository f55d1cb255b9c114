package podsource

import (
	"context"
	"encoding/json"
	"fmt"
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
	watchPod  *corev1.Pod
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/pods" {
		http.NotFound(w, r)
		return
	}
	a.mu.Lock()
	a.selectors = append(a.selectors, r.URL.Query().Get("fieldSelector"))
	a.auth = append(a.auth, r.Header.Get("Authorization"))
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
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
	late := apiPod("late", "11111111-2222-3333-4444-555555555555", "node-a", "abc")
	late.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
	late.ResourceVersion = "11"
	api := &apiServer{watchPod: late}
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
	l, name, err := Open(ctx, Config{Mode: Kubernetes, Kubeconfig: kubeconfig, NodeName: "node-a", SyncTimeout: 10 * time.Second}, nil)
	if err != nil || name != Kubernetes {
		t.Fatal(name, err)
	}
	poll.Every(20*time.Millisecond).Until(t, 10*time.Second, "list and watch giving 2 pods", func() (bool, string, error) {
		pods, err := l.Pods(ctx)
		return len(pods) == 2, fmt.Sprintf("%d pods: %+v", len(pods), pods), err
	})
	api.mu.Lock()
	defer api.mu.Unlock()
	for i, sel := range api.selectors {
		if sel != "spec.nodeName=node-a" || api.auth[i] != "Bearer secret-token" {
			t.Errorf("request %d: fieldSelector %q, Authorization %q", i, sel, api.auth[i])
		}
	}
}
