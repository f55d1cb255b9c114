package apiconn

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// The sink makes the requests client-go's typed EventSinkImpl makes: POST
// to the Event's namespace, PUT and strategic-merge PATCH of the Event by
// name, and decodes the answer.
func TestEventSinkRequests(t *testing.T) {
	type req struct{ method, path, ctype, body string }
	var mu sync.Mutex
	var got []req
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, req{r.Method, r.URL.Path, r.Header.Get("Content-Type"), string(b)})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&corev1.Event{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
			ObjectMeta: metav1.ObjectMeta{Name: "p.1", Namespace: "ns", ResourceVersion: "7"}})
	}))
	defer api.Close()
	s, err := NewEventSink(&rest.Config{Host: api.URL, QPS: -1, ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "p.1", Namespace: "ns"}, Reason: "MisplacedContainer"}
	out, err := s.Create(e)
	if err != nil || out.ResourceVersion != "7" {
		t.Fatalf("create: %v, %+v", err, out)
	}
	if _, err := s.Update(e); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Patch(e, []byte(`{"count":2}`)); err != nil {
		t.Fatal(err)
	}
	want := []req{
		{"POST", "/api/v1/namespaces/ns/events", "application/json", ""},
		{"PUT", "/api/v1/namespaces/ns/events/p.1", "application/json", ""},
		{"PATCH", "/api/v1/namespaces/ns/events/p.1", "application/strategic-merge-patch+json", `{"count":2}`},
	}
	if len(got) != len(want) {
		t.Fatalf("requests %+v, want %+v", got, want)
	}
	for i, w := range want {
		g := got[i]
		if g.method != w.method || g.path != w.path || g.ctype != w.ctype || (w.body != "" && g.body != w.body) {
			t.Errorf("request %d: %+v, want %+v", i, g, w)
		}
	}
	var sent corev1.Event
	if err := json.Unmarshal([]byte(got[0].body), &sent); err != nil || sent.Reason != "MisplacedContainer" || sent.Kind != "Event" || sent.APIVersion != "v1" {
		t.Errorf("created body %q (%v)", got[0].body, err)
	}
}
