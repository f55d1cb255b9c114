package agent

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/podsource"
)

// closingLister is a pod source that counts its Close calls.
type closingLister struct{ closed int }

func (l *closingLister) Pods(context.Context) ([]metadata.Pod, error) { return nil, nil }
func (l *closingLister) Close()                                       { l.closed++ }

// An agent whose start fails says why and releases what it opened: no
// panic on the way out (a start that failed once closed a nil Agent and a
// nil Meta), whichever half failed.
func TestFailedStartSaysWhyAndPanicsNot(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nowhere")
	for _, c := range []struct {
		name string
		o    Options
		want string
	}{
		{"Events without an API server", Options{Metadata: podsource.None, Events: true, Kubeconfig: filepath.Join(missing, "kubeconfig")}, "--events needs the API server"},
		{"a host root that is not there", Options{Metadata: podsource.None, HostRoot: missing}, missing},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.Listen, c.o.Interval, c.o.Log = "127.0.0.1:0", time.Second, slog.New(slog.DiscardHandler)
			cfg, err := c.o.Config()
			if err != nil {
				t.Fatal(err)
			}
			a, err := cfg.Complete(t.Context())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Complete: %v, want an error naming %q", err, c.want)
			}
			if a != nil {
				t.Errorf("Complete returned an agent with its error")
			}
		})
	}
}

// OpenMeta that fails leaves nothing open, and Close releases what it
// opened once, however often it is called; a lister handed in is the
// caller's, never closed here.
func TestOpenMetaReleases(t *testing.T) {
	given := &closingLister{}
	o := Options{Listen: "127.0.0.1:0", Interval: time.Second, Log: slog.New(slog.DiscardHandler), Lister: given,
		Events: true, Kubeconfig: filepath.Join(t.TempDir(), "kubeconfig")}
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if m, err := cfg.OpenMeta(t.Context()); err == nil || m != nil {
		t.Fatalf("OpenMeta with Events and no API server: %v, %v; want an error and no Meta", m, err)
	}
	cfg.Events = false
	m, err := cfg.OpenMeta(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if m.Sizes == nil || m.Lister != given {
		t.Fatalf("Meta %+v: want sizes over the lister given", m)
	}
	m.Close()
	m.Close()
	if given.closed != 0 {
		t.Errorf("the lister handed in was closed %d times, want 0 (it is the caller's)", given.closed)
	}
}
