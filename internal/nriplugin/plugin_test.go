package nriplugin

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type event struct{ ns, name, uid, reason, msg string }

// fakeEvents is a hand-written Notifier.
type fakeEvents struct {
	mu  sync.Mutex
	got []event
}

func (f *fakeEvents) Pod(ns, name, uid, reason, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, event{ns, name, uid, reason, msg})
}

func (f *fakeEvents) events() []event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]event(nil), f.got...)
}

func newTestPlugin(t *testing.T, listedFn func(string) bool, dryRun bool) (*Plugin, *Metrics, *fakeEvents) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	ev := &fakeEvents{}
	p := NewPlugin(listedFn, dryRun, m, ev, slog.New(slog.DiscardHandler))
	if _, err := p.Configure(context.Background(), "", "containerd", "v2.4.2"); err != nil {
		t.Fatal(err)
	}
	return p, m, ev
}

var (
	slice    = "kubepods-besteffort-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
	literal  = slice + ":cri-containerd:" + cid
	expanded = "/kubepods.slice/kubepods-besteffort.slice/" + slice + "/cri-containerd-" + cid + ".scope"
)

func TestPlacedChangesPathCountsAndRaisesEvent(t *testing.T) {
	p, m, ev := newTestPlugin(t, listed("spin"), false)
	adj, upd, err := p.CreateContainer(context.Background(), pod("spin", slice), ctr(literal))
	if err != nil || upd != nil {
		t.Fatalf("CreateContainer: updates %v, err %v", upd, err)
	}
	if got := adj.GetLinux().GetCgroupsPath(); got != expanded {
		t.Fatalf("cgroupsPath set to %q, want %q", got, expanded)
	}
	if v := testutil.ToFloat64(m.Containers.WithLabelValues("spin", ResultPlaced)); v != 1 {
		t.Errorf("placed count %v, want 1", v)
	}
	evs := ev.events()
	if len(evs) != 1 || evs[0].reason != "CgwardenContainerPlaced" || evs[0].uid != uid || evs[0].name != "web" || evs[0].ns != "apps" ||
		!strings.Contains(evs[0].msg, expanded) || !strings.Contains(evs[0].msg, literal) {
		t.Errorf("events %+v, want one CgwardenContainerPlaced on apps/web naming both paths", evs)
	}
}

func TestAlreadyRightIsSetWithoutEvent(t *testing.T) {
	p, m, ev := newTestPlugin(t, listed("spin"), false)
	right := "/kubepods/besteffort/pod" + uid + "/" + cid
	adj, _, err := p.CreateContainer(context.Background(), pod("spin", "/kubepods/besteffort/pod"+uid), ctr(right))
	if err != nil || adj.GetLinux().GetCgroupsPath() != right || adj.GetAnnotations()[Annotation] != right {
		t.Fatalf("adjustment %+v, err %v; want the same path set and annotated", adj, err)
	}
	if v := testutil.ToFloat64(m.Containers.WithLabelValues("spin", ResultAlreadyRight)); v != 1 {
		t.Errorf("already_right count %v, want 1", v)
	}
	if len(ev.events()) != 0 {
		t.Errorf("events %+v for a path that did not change", ev.events())
	}
}

func TestUnlistedHandlerUntouched(t *testing.T) {
	p, m, ev := newTestPlugin(t, listed("spin"), false)
	for _, h := range []string{"runc", ""} {
		adj, upd, err := p.CreateContainer(context.Background(), pod(h, slice), ctr(literal))
		if adj != nil || upd != nil || err != nil {
			t.Errorf("handler %q: adjustment %+v, updates %v, err %v; want nothing", h, adj, upd, err)
		}
	}
	if v := testutil.ToFloat64(m.Requests); v != 2 {
		t.Errorf("requests %v, want 2", v)
	}
	if n := testutil.CollectAndCount(m.Containers); n != 0 {
		t.Errorf("%d container series for unlisted handlers", n)
	}
	if len(ev.events()) != 0 {
		t.Errorf("events %+v", ev.events())
	}
}

func TestDryRunSetsNothing(t *testing.T) {
	p, m, ev := newTestPlugin(t, listed("spin"), true)
	adj, _, err := p.CreateContainer(context.Background(), pod("spin", slice), ctr(literal))
	if adj != nil || err != nil {
		t.Fatalf("dry run: adjustment %+v, err %v", adj, err)
	}
	if v := testutil.ToFloat64(m.Containers.WithLabelValues("spin", ResultWouldPlace)); v != 1 {
		t.Errorf("would_place count %v, want 1", v)
	}
	if evs := ev.events(); len(evs) != 1 || evs[0].reason != "CgwardenWouldPlaceContainer" {
		t.Errorf("events %+v, want one CgwardenWouldPlaceContainer", evs)
	}
}

func TestCannotPlaceLetsThrough(t *testing.T) {
	p, m, _ := newTestPlugin(t, listed("spin"), false)
	adj, _, err := p.CreateContainer(context.Background(), pod("spin", "not-a-parent"), ctr(literal))
	if adj != nil || err != nil {
		t.Fatalf("adjustment %+v, err %v; want the container let through", adj, err)
	}
	if v := testutil.ToFloat64(m.Failures.WithLabelValues(FailPlace)); v != 1 {
		t.Errorf("cannot_place failures %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.Containers.WithLabelValues("spin", ResultFailed)); v != 1 {
		t.Errorf("failed count %v, want 1", v)
	}
}

func TestPanicLetsThrough(t *testing.T) {
	p, m, _ := newTestPlugin(t, func(string) bool { panic("boom") }, false)
	adj, _, err := p.CreateContainer(context.Background(), pod("spin", slice), ctr(literal))
	if adj != nil || err != nil {
		t.Fatalf("adjustment %+v, err %v; want the container let through", adj, err)
	}
	if v := testutil.ToFloat64(m.Failures.WithLabelValues(FailPanic)); v != 1 {
		t.Errorf("panic failures %v, want 1", v)
	}
}

// A runtime other than containerd and CRI-O: under systemd the
// container's name is unknown, so it is let through, not guessed.
func TestUnknownRuntimeOnSystemdLetsThrough(t *testing.T) {
	m := NewMetrics(nil)
	p := NewPlugin(listed("spin"), false, m, nil, slog.New(slog.DiscardHandler))
	if _, err := p.Configure(context.Background(), "", "some-runtime", "1"); err != nil {
		t.Fatal(err)
	}
	adj, _, err := p.CreateContainer(context.Background(), pod("spin", slice), ctr(literal))
	if adj != nil || err != nil {
		t.Fatalf("adjustment %+v, err %v", adj, err)
	}
}
