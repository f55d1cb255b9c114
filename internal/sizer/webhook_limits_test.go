package sizer

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
)

// blockingVMs holds every lookup until release is closed.
type blockingVMs struct {
	started chan struct{}
	release chan struct{}
}

func (b blockingVMs) GetVM(ctx context.Context, ns, name string) (*unstructured.Unstructured, error) {
	b.started <- struct{}{}
	<-b.release
	return vm(1.0), nil
}

// At most InFlight reviews are handled at once, whoever sends them: one
// more waits about slotWait and is refused (429, which failurePolicy
// Ignore turns into an unsized pod), and is counted; once the others
// finish, reviews are answered again.
func TestWebhookInFlightBound(t *testing.T) {
	b := blockingVMs{started: make(chan struct{}, 4), release: make(chan struct{})}
	var mu sync.Mutex
	counts := map[string]int{}
	h := &Webhook{VMs: b, Log: slog.New(slog.DiscardHandler), InFlight: 2, Count: func(r string) {
		mu.Lock()
		counts[r]++
		mu.Unlock()
	}}
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := mustJSON(t, reviewOf(t, "ns", runnerPod()))
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if code, _ := post(t, srv, body, false); code != http.StatusOK {
				t.Errorf("a review within the bound: %d", code)
			}
		})
	}
	<-b.started
	<-b.started
	t0 := time.Now()
	if code, _ := post(t, srv, body, false); code != http.StatusTooManyRequests {
		t.Errorf("a third review at once: %d, want 429", code)
	}
	if d := time.Since(t0); d > slotWait+2*time.Second {
		t.Errorf("refused after %v, want about %v", d, slotWait)
	}
	close(b.release)
	wg.Wait()
	if code, _ := post(t, srv, body, false); code != http.StatusOK {
		t.Errorf("after the others finished: %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if counts["refused"] != 1 || counts["sized"] != 3 {
		t.Errorf("counted %v, want 1 refused and 3 sized", counts)
	}
}

// fakeAPI answers every GET of a VirtualMachine, counting them.
func fakeAPI(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","metadata":{"name":"vm1","namespace":"ns"},"spec":{"guest":{"cpus":{"use":1}}}}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The webhook's VM lookups and the resize controller's calls draw on two
// budgets: with the webhook's spent (anyone who reaches /mutate can spend
// it), the controller's calls go at once, and with the controller's
// spent, admissions still look VMs up at once. Each budget still binds
// its own client.
func TestWebhookLookupsHaveTheirOwnBudget(t *testing.T) {
	api := fakeAPI(t)
	rc := &rest.Config{Host: api.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}
	o := Options{QPS: 0.01, Burst: 1, WebhookQPS: 0.01, WebhookBurst: 1}
	quick := func(f func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		return f(ctx)
	}
	webhook := func(cl clients) func(ctx context.Context) error {
		return func(ctx context.Context) error { _, err := cl.webhookVMs.GetVM(ctx, "ns", "vm1"); return err }
	}
	controller := func(cl clients) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := cl.dyn.Resource(VirtualMachines).Namespace("ns").Get(ctx, "vm1", metav1.GetOptions{})
			return err
		}
	}

	cl, err := newClients(rc, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := quick(webhook(cl)); err != nil {
		t.Fatal(err)
	}
	if err := quick(webhook(cl)); err == nil {
		t.Error("the webhook's second lookup went through: its budget binds nothing")
	}
	if err := quick(controller(cl)); err != nil {
		t.Errorf("the webhook's budget spent, the controller waits: %v", err)
	}

	cl, err = newClients(rc, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := quick(controller(cl)); err != nil {
		t.Fatal(err)
	}
	if err := quick(controller(cl)); err == nil {
		t.Error("the controller's second call went through: its budget binds nothing")
	}
	if err := quick(webhook(cl)); err != nil {
		t.Errorf("the controller's budget spent, admissions wait: %v", err)
	}
}
