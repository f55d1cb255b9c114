package apiconn

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// fakeSink answers each write with err.
type fakeSink struct{ err error }

func (f fakeSink) Create(e *corev1.Event) (*corev1.Event, error)          { return e, f.err }
func (f fakeSink) Update(e *corev1.Event) (*corev1.Event, error)          { return e, f.err }
func (f fakeSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) { return e, f.err }

// CountingSink reports every write with its reason and error, except a
// Patch refused NotFound (the broadcaster creates the Event instead).
func TestCountingSink(t *testing.T) {
	refused := apierrors.NewForbidden(corev1.Resource("events"), "p.1", errors.New("no"))
	gone := apierrors.NewNotFound(corev1.Resource("events"), "p.1")
	for _, tc := range []struct {
		name  string
		err   error
		write func(s *CountingSink, e *corev1.Event) error
		want  []string
	}{
		{"create", nil, func(s *CountingSink, e *corev1.Event) error { _, err := s.Create(e); return err }, []string{"R ok"}},
		{"create refused", refused, func(s *CountingSink, e *corev1.Event) error { _, err := s.Create(e); return err }, []string{"R failed"}},
		{"update", nil, func(s *CountingSink, e *corev1.Event) error { _, err := s.Update(e); return err }, []string{"R ok"}},
		{"patch", nil, func(s *CountingSink, e *corev1.Event) error { _, err := s.Patch(e, nil); return err }, []string{"R ok"}},
		{"patch refused", refused, func(s *CountingSink, e *corev1.Event) error { _, err := s.Patch(e, nil); return err }, []string{"R failed"}},
		{"patch of a gone Event", gone, func(s *CountingSink, e *corev1.Event) error { _, err := s.Patch(e, nil); return err }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			s := &CountingSink{Sink: fakeSink{tc.err}, Count: func(reason string, err error) {
				r := "ok"
				if err != nil {
					r = "failed"
				}
				got = append(got, reason+" "+r)
			}}
			if err := tc.write(s, &corev1.Event{Reason: "R"}); err != tc.err {
				t.Errorf("error %v, want the sink's %v", err, tc.err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("counted %q, want %q", got, tc.want)
			}
		})
	}
}

// EventRecorder with a count counts what the API server took and what it
// refused, by reason, after the broadcaster: an Event repeated is
// aggregated into a PATCH of the first, and when that Event is gone
// (NotFound) the broadcaster creates it again, counted once.
func TestEventRecorderCounts(t *testing.T) {
	var mu sync.Mutex
	var methods []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		methods = append(methods, r.Method)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		var e corev1.Event
		_ = json.NewDecoder(r.Body).Decode(&e)
		switch {
		case r.Method == http.MethodPatch:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
				Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound})
		case e.Reason == "Refused":
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
				Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden})
		default:
			e.ResourceVersion = "1"
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(&e)
		}
	}))
	defer api.Close()
	counted := make(chan string, 10)
	rc := &rest.Config{Host: api.URL, QPS: -1, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}
	rec, stop, err := EventRecorder(context.Background(), rc, corev1.EventSource{Component: "test"}, func(reason string, err error) {
		r := "sent"
		if err != nil {
			r = "failed"
		}
		counted <- reason + " " + r
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}}
	next := func() string {
		t.Helper()
		select {
		case c := <-counted:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("no write counted in 10 s")
			return ""
		}
	}
	rec.Event(pod, corev1.EventTypeNormal, "Taken", "first")
	if c := next(); c != "Taken sent" {
		t.Errorf("counted %q, want Taken sent", c)
	}
	rec.Event(pod, corev1.EventTypeNormal, "Taken", "first") // aggregated: PATCH, NotFound, POST
	if c := next(); c != "Taken sent" {
		t.Errorf("counted %q, want Taken sent", c)
	}
	rec.Event(pod, corev1.EventTypeWarning, "Refused", "second")
	if c := next(); c != "Refused failed" {
		t.Errorf("counted %q, want Refused failed", c)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"POST", "PATCH", "POST", "POST"}; !slices.Equal(methods, want) {
		t.Errorf("requests %q, want %q", methods, want)
	}
	select {
	case c := <-counted:
		t.Errorf("counted %q more", c)
	default:
	}
}
