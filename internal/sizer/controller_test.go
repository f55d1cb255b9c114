package sizer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// The controller against fake clients: it idles without the CRD; with it,
// a burst of VM changes becomes one resize patch to the last size (a
// trailing debounce), on the
// pod's resize subresource, cut to the node's allocatable; a BestEffort
// runner pod gets one CPUNotSized Event.
func TestControllerResizesThroughSubresource(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}}
	sized := runningRunner("1", "")
	sized.Spec.NodeName = "n1"
	be := runningRunner("", "")
	be.Name, be.UID, be.Labels = "vm2-xyz", "u2", map[string]string{"vm.neon.tech/name": "vm2"}
	be.OwnerReferences = nil
	be.Spec.NodeName = "n1"
	cs := fake.NewClientset(node, sized, be)
	var mu sync.Mutex
	var patches []k8stesting.PatchAction
	cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		patches = append(patches, a.(k8stesting.PatchAction))
		mu.Unlock()
		// As the API server would: the pod's request is now 4.
		p := sized.DeepCopy()
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("4")
		return true, p, cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, p.Namespace)
	})
	// Each VM's status names its runner, as NeonVM's controller writes it.
	vm1 := vm(1.0)
	_ = unstructured.SetNestedField(vm1.Object, sized.Name, "status", "podName")
	vm2 := vm(2.0)
	vm2.SetName("vm2")
	_ = unstructured.SetNestedField(vm2.Object, be.Name, "status", "podName")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{VirtualMachines: "VirtualMachineList"}, vm1, vm2)
	events := record.NewFakeRecorder(10)
	var crd atomic.Bool
	var looked atomic.Int32 // discovery calls that found no CRD
	c := &Controller{Client: cs, Dynamic: dyn, Events: events, Log: slog.New(slog.DiscardHandler),
		Coalesce: 500 * time.Millisecond, Recheck: 100 * time.Millisecond,
		crdCheck: func() (bool, error) {
			if crd.Load() {
				return true, nil
			}
			looked.Add(1)
			return false, nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	// Idle while discovery has no CRD: looked for again every Recheck.
	poll.Every(10*time.Millisecond).Until(t, 5*time.Second, "the CRD looked for twice", func() (bool, string, error) {
		return looked.Load() >= 2, fmt.Sprintf("%d looks", looked.Load()), nil
	})
	crd.Store(true)
	// Found: the informers synced and the initial sync of both VMs done,
	// which the BestEffort runner's CPUNotSized Event marks (vm1's runner
	// is at its size already: no patch, no Event).
	poll.Every(10*time.Millisecond).Until(t, 10*time.Second, "the initial sync's CPUNotSized Event", func() (bool, string, error) {
		return len(events.Events) >= 1, "no Event yet", nil
	})

	// A burst of ten changes 100 ms apart, longer than the 500 ms window
	// (a leading window would patch an intermediate size in the middle):
	// one patch, to the last size, 6, cut to the node's 4.
	for _, use := range []float64{2, 3, 2.5, 3.5, 1.5, 3, 2, 3.25, 8, 6} {
		u, err := dyn.Resource(VirtualMachines).Namespace("ns").Get(ctx, "vm1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(u.Object, use, "spec", "guest", "cpus", "use")
		if _, err := dyn.Resource(VirtualMachines).Namespace("ns").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the burst's pace, not a wait for anything
	}
	poll.Every(10*time.Millisecond).Until(t, 10*time.Second, "the burst's resize", func() (bool, string, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(patches) >= 1, "no patch yet", nil
	})
	// No second patch in the window after it: the burst is one resize.
	time.Sleep(c.Coalesce)
	mu.Lock()
	defer mu.Unlock()
	if len(patches) != 1 {
		t.Fatalf("%d patches, want 1 (coalesced)", len(patches))
	}
	p := patches[0]
	if p.GetSubresource() != "resize" || p.GetName() != "vm1-abcde" {
		t.Errorf("patched %s/%s", p.GetName(), p.GetSubresource())
	}
	if want := string(resizePatch(ResizeDecision{Container: "neonvm-runner", To: 4000})); string(p.GetPatch()) != want {
		t.Errorf("patch %s, want %s", p.GetPatch(), want)
	}
	var got []string
	for len(events.Events) > 0 {
		got = append(got, <-events.Events)
	}
	var notSized, resized int
	for _, e := range got {
		switch {
		case strings.Contains(e, ReasonNotSized):
			notSized++
		case strings.Contains(e, ReasonResized):
			resized++
		}
	}
	if notSized != 1 || resized != 1 {
		t.Errorf("events %q: want one %s and one %s", got, ReasonNotSized, ReasonResized)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A refused resize is retried with backoff until it succeeds: the first
// refusals PATCHes of each pod's resize are refused (429, 500, a server
// timeout, a conflict: each a refusal the API server gives under load),
// and every pod still ends at its VM's size with refusals+1 PATCHes, of
// which only the last is applied (never a second one for the one change),
// counted failed and retried; a pod whose PATCH is always refused (422
// Invalid) keeps being retried, no more often than RetryMax, with one
// CPUResizeFailed Event per EventWindow.
func TestControllerRetriesRefusedResizes(t *testing.T) {
	const refusals = 3
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}}}
	sizes := map[string]float64{"vm0": 2, "vm1": 3, "vm2": 1.5, "vm3": 4, "bad": 2}
	objs := []runtime.Object{node}
	var vms []runtime.Object
	for name, use := range sizes {
		p := runningRunner("1", "")
		p.Name, p.UID, p.Labels = name+"-runner", types.UID("uid-"+name), map[string]string{"vm.neon.tech/name": name}
		p.OwnerReferences[0].Name = name
		p.Spec.NodeName = "n1"
		objs = append(objs, p)
		v := vm(use)
		v.SetName(name)
		_ = unstructured.SetNestedField(v.Object, p.Name, "status", "podName")
		vms = append(vms, v)
	}
	cs := fake.NewClientset(objs...)
	refuse := []error{
		apierrors.NewTooManyRequests("the server has received too many requests", 1),
		apierrors.NewInternalError(errors.New("etcdserver: leader changed")),
		apierrors.NewServerTimeout(corev1.Resource("pods"), "patch", 1),
		apierrors.NewConflict(corev1.Resource("pods"), "p", errors.New("the object has been modified")),
	}
	var mu sync.Mutex
	patches := map[string]int{} // resize PATCHes per pod
	applied := map[string]int{} // of which let through to the tracker
	cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		if pa.GetSubresource() != "resize" {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		patches[pa.GetName()]++
		n := patches[pa.GetName()]
		switch {
		case pa.GetName() == "bad-runner":
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "bad-runner", nil)
		case n <= refusals:
			return true, nil, refuse[(len(pa.GetName())+n)%len(refuse)]
		}
		applied[pa.GetName()]++
		return false, nil, nil // the tracker applies the patch
	})
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{VirtualMachines: "VirtualMachineList"}, vms...)
	reg := prometheus.NewRegistry()
	events := record.NewFakeRecorder(100)
	c := &Controller{Client: cs, Dynamic: dyn, Events: events, Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics(reg),
		Coalesce: 20 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 40 * time.Millisecond,
		crdCheck: func() (bool, error) { return true, nil }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	poll.Every(10*time.Millisecond).Until(t, 10*time.Second, "every pod at its VM's size", func() (bool, string, error) {
		off := 0
		var example string
		for name, use := range sizes {
			if name == "bad" {
				continue
			}
			p, err := cs.CoreV1().Pods("ns").Get(ctx, name+"-runner", metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			q := p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
			if q.MilliValue() != int64(use*1000) {
				off++
				example = fmt.Sprintf("%s requests %s, want %v", p.Name, q.String(), use)
			}
		}
		return off == 0, fmt.Sprintf("%d not yet (%s)", off, example), nil
	})
	mu.Lock()
	for name := range sizes {
		if n := patches[name+"-runner"]; name != "bad" && n != refusals+1 {
			t.Errorf("%s: %d resize PATCHes, want %d (%d refused, then one applied)", name, n, refusals+1, refusals)
		}
	}
	before := patches["bad-runner"]
	mu.Unlock()

	// The pod refused for good, over a window of ten RetryMax: retried,
	// never more often than RetryMax (at most 10, and the one due when
	// the window opens).
	const window = 400 * time.Millisecond
	time.Sleep(window)
	mu.Lock()
	during := patches["bad-runner"] - before
	mu.Unlock()
	if max := int(window/c.RetryMax) + 1; during < 1 || during > max {
		t.Errorf("the always-refused pod: %d PATCHes in %v; want 1 to %d (one per RetryMax %v)", during, window, max, c.RetryMax)
	}
	if n := testutil.ToFloat64(c.Metrics.retrying); n != 1 {
		t.Errorf("cgwarden_sizer_retrying_vms %v, want 1 (the VM refused for good)", n)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	total := 0
	for _, n := range patches {
		total += n
	}
	bad := patches["bad-runner"]
	// One change of each VM, one PATCH applied: a retry never follows the
	// one that succeeded.
	for name := range sizes {
		want := 1
		if name == "bad" {
			want = 0
		}
		if n := applied[name+"-runner"]; n != want {
			t.Errorf("%s: %d resize PATCHes applied, want %d", name, n, want)
		}
	}
	mu.Unlock()
	failed := testutil.ToFloat64(c.Metrics.resizes.WithLabelValues("failed"))
	if want := float64(total - 4); failed != want {
		t.Errorf("failed %v, want %v (every refused PATCH)", failed, want)
	}
	if resized := testutil.ToFloat64(c.Metrics.resizes.WithLabelValues("resized")); resized != 4 {
		t.Errorf("resized %v, want 4", resized)
	}
	if retried := testutil.ToFloat64(c.Metrics.resizes.WithLabelValues("retried")); retried < float64(4*refusals+bad-1) {
		t.Errorf("retried %v, want at least %d (each failed sync put back)", retried, 4*refusals+bad-1)
	}
	// One CPUResizeFailed per pod in the 10-minute EventWindow, however
	// many PATCHes failed.
	failedEvents := 0
	for len(events.Events) > 0 {
		if strings.Contains(<-events.Events, ReasonResizeError) {
			failedEvents++
		}
	}
	if failedEvents != len(sizes) {
		t.Errorf("%d %s Events for %d refused pods: want one each", failedEvents, ReasonResizeError, len(sizes))
	}
}

// The retry backoff: RetryBase doubling per failure of one VM, capped at
// RetryMax, independent per VM, and reset by Forget.
func TestRetryLimiter(t *testing.T) {
	l := retryLimiter(500*time.Millisecond, 5*time.Minute)
	var got []time.Duration
	for range 12 {
		got = append(got, l.When("ns/a"))
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second, 5 * time.Minute, 5 * time.Minute}
	if !slices.Equal(got, want) {
		t.Errorf("delays %v, want %v", got, want)
	}
	if d := l.When("ns/b"); d != 500*time.Millisecond {
		t.Errorf("another VM's first delay %v, want 500ms", d)
	}
	l.Forget("ns/a")
	if d := l.When("ns/a"); d != 500*time.Millisecond {
		t.Errorf("after Forget: %v, want 500ms", d)
	}
}

// sizeChanged: what sync reads of a VM (its size, the pod its status
// names) resets a failed resize's backoff; its other updates do not.
func TestSizeChanged(t *testing.T) {
	base := vm("2")
	_ = unstructured.SetNestedField(base.Object, "vm1-abcde", "status", "podName")
	with := func(f func(u *unstructured.Unstructured)) *unstructured.Unstructured {
		u := base.DeepCopy()
		f(u)
		return u
	}
	for _, tc := range []struct {
		name string
		cur  any
		want bool
	}{
		{"the same", base.DeepCopy(), false},
		{"status and labels", with(func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{"a": "b"})
			_ = unstructured.SetNestedField(u.Object, "Running", "status", "phase")
		}), false},
		{"use", with(func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "3", "spec", "guest", "cpus", "use")
		}), true},
		{"runner", with(func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "vm1-fghij", "status", "podName")
		}), true},
		{"unreadable", with(func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "lots", "spec", "guest", "cpus", "use")
		}), true},
		{"a tombstone", cache.DeletedFinalStateUnknown{Key: "ns/vm1", Obj: base}, true},
	} {
		if got := sizeChanged(base, tc.cur); got != tc.want {
			t.Errorf("%s: sizeChanged %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A change of the VM's size ends a failed resize's backoff: with the
// first failure's backoff an hour, the resize to the new size is made
// within the coalescing window of the change, and applied.
func TestControllerVMChangeEndsBackoff(t *testing.T) {
	p := runningRunner("1", "")
	cs := fake.NewClientset(p)
	var mu sync.Mutex
	var patches []string
	cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		mu.Lock()
		defer mu.Unlock()
		patches = append(patches, string(pa.GetPatch()))
		if len(patches) == 1 {
			return true, nil, apierrors.NewTooManyRequests("slow down", 0)
		}
		return false, nil, nil
	})
	v := vm("2")
	_ = unstructured.SetNestedField(v.Object, p.Name, "status", "podName")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{VirtualMachines: "VirtualMachineList"}, v)
	c := &Controller{Client: cs, Dynamic: dyn, Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics(prometheus.NewRegistry()),
		Coalesce: 20 * time.Millisecond, RetryBase: time.Hour, RetryMax: time.Hour,
		crdCheck: func() (bool, error) { return true, nil }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	poll.Every(10*time.Millisecond).Until(t, 10*time.Second, "the first resize refused and put back", func() (bool, string, error) {
		return testutil.ToFloat64(c.Metrics.resizes.WithLabelValues("retried")) == 1, "not yet", nil
	})
	changed := time.Now()
	u, err := dyn.Resource(VirtualMachines).Namespace("ns").Get(ctx, "vm1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(u.Object, "3", "spec", "guest", "cpus", "use")
	if _, err := dyn.Resource(VirtualMachines).Namespace("ns").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Every(10*time.Millisecond).Until(t, 10*time.Second, "the pod at the new size", func() (bool, string, error) {
		got, err := cs.CoreV1().Pods("ns").Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		q := got.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
		return q.MilliValue() == 3000, "requests " + q.String(), nil
	})
	t.Logf("resized %v after the change", time.Since(changed).Round(time.Millisecond))
	poll.Every(10*time.Millisecond).Until(t, 10*time.Second, "no VM waiting for a retry", func() (bool, string, error) {
		n := testutil.ToFloat64(c.Metrics.retrying)
		return n == 0, fmt.Sprintf("cgwarden_sizer_retrying_vms %v", n), nil
	})
	mu.Lock()
	if want := []string{string(resizePatch(ResizeDecision{Container: "neonvm-runner", To: 2000})), string(resizePatch(ResizeDecision{Container: "neonvm-runner", To: 3000}))}; !slices.Equal(patches, want) {
		t.Errorf("patches %q, want %q", patches, want)
	}
	mu.Unlock()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
