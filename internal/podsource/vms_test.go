package podsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// fakeWatches stands for the API server's watches: it records which VM
// objects are watched, and hands the test each watch's sink.
type fakeWatches struct {
	mu      sync.Mutex
	running map[metadata.VMRef]vmSink
	starts  []metadata.VMRef
}

func newFakeWatches() *fakeWatches { return &fakeWatches{running: map[metadata.VMRef]vmSink{}} }

func (f *fakeWatches) watch(ctx context.Context, r metadata.VMRef, sink vmSink) {
	f.mu.Lock()
	f.running[r] = sink
	f.starts = append(f.starts, r)
	f.mu.Unlock()
	<-ctx.Done()
	f.mu.Lock()
	delete(f.running, r)
	f.mu.Unlock()
}

func (f *fakeWatches) watched() []metadata.VMRef {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []metadata.VMRef
	for r := range f.running {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b metadata.VMRef) int { return cmpRef(a, b) })
	return out
}

func (f *fakeWatches) started() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.starts)
}

func (f *fakeWatches) sink(r metadata.VMRef) vmSink {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running[r]
}

func cmpRef(a, b metadata.VMRef) int {
	switch {
	case a.Kind+a.Namespace+a.Name < b.Kind+b.Namespace+b.Name:
		return -1
	case a == b:
		return 0
	}
	return 1
}

var quiet = slog.New(slog.DiscardHandler)

func servesAll(schema.GroupVersionResource) (bool, error) { return true, nil }

func runner(uid, ns, vm string) metadata.Pod {
	return metadata.Pod{UID: uid, Namespace: ns, Name: vm + "-runner-" + uid, Labels: map[string]string{vmsize.LabelNeonVM: vm}}
}

func neonVMObject(ns, name string, use any) map[string]any {
	return map[string]any{
		"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": "uid-" + name},
		"spec":     map[string]any{"guest": map[string]any{"cpus": map[string]any{"min": int64(1), "max": int64(8), "use": use}}},
	}
}

// TestVMWatchesAreCountedByPods: a VM is watched from the first pod that
// references it to the last; a pod that runs no VM starts nothing; a pod
// owned by a VirtualMachine other than its label's holds both.
func TestVMWatchesAreCountedByPods(t *testing.T) {
	f := newFakeWatches()
	v := newVMWatches(t.Context(), quiet, f.watch, servesAll, doubling(time.Millisecond, time.Millisecond))
	defer v.Close()
	db := metadata.VMRef{Kind: "neonvm", Namespace: "a", Name: "db"}

	plain := metadata.Pod{UID: "p0", Namespace: "a", Name: "web"}
	v.Track([]metadata.Pod{plain})
	if v.Watches() != 0 || len(v.items) != 0 {
		t.Fatalf("a pod that runs no VM: %d watches", v.Watches())
	}

	r1 := runner("p1", "a", "db")
	v.Track([]metadata.Pod{plain, r1})
	poll.Every(5*time.Millisecond).UntilTrue(t, 10*time.Second, "the watch of a/db started", func() bool { return slices.Equal(f.watched(), []metadata.VMRef{db}) })
	if v.Watches() != 1 {
		t.Errorf("Watches() = %d, want 1", v.Watches())
	}

	// A second runner of the same VM (a migration's target pod): the same
	// watch, not a second one.
	r2 := runner("p2", "a", "db")
	v.Track([]metadata.Pod{plain, r1, r2})
	v.Track([]metadata.Pod{r2})
	v.Track([]metadata.Pod{r2}) // nothing changed
	if n := f.started(); n != 1 {
		t.Errorf("%d watches started for one VM and two pods, want 1", n)
	}
	if got := f.watched(); !slices.Equal(got, []metadata.VMRef{db}) {
		t.Errorf("with one of the two pods left, watched %v", got)
	}

	// The last pod goes: the watch stops.
	v.Track(nil)
	poll.Every(5*time.Millisecond).UntilTrue(t, 10*time.Second, "the watch of a/db stopped", func() bool { return len(f.watched()) == 0 })
	if v.Watches() != 0 {
		t.Errorf("Watches() = %d after the last pod went", v.Watches())
	}

	// A runner whose owner is another VirtualMachine than its label says,
	// and a virt-launcher: three VMs, one watch each, in the pods'
	// namespaces.
	owned := runner("p3", "b", "db")
	owned.Owners = []metadata.Owner{{APIVersion: "vm.neon.tech/v1", Kind: "VirtualMachine", Name: "db-owner", UID: "u"}}
	launcher := metadata.Pod{UID: "p4", Namespace: "c", Name: "virt-launcher-x", Labels: map[string]string{vmsize.LabelKubeVirt: "fedora"}}
	v.Track([]metadata.Pod{owned, launcher})
	want := []metadata.VMRef{{Kind: "kubevirt", Namespace: "c", Name: "fedora"}, {Kind: "neonvm", Namespace: "b", Name: "db"}, {Kind: "neonvm", Namespace: "b", Name: "db-owner"}}
	poll.Every(5*time.Millisecond).UntilTrue(t, 10*time.Second, fmt.Sprintf("watches of %v", want), func() bool { return slices.Equal(f.watched(), want) })

	// The runner's label changes to a new VM: its old VM's watch stops,
	// the owner's stays (the pod still references it).
	moved := owned
	moved.Labels = map[string]string{vmsize.LabelNeonVM: "db2"}
	v.Track([]metadata.Pod{moved, launcher})
	want = []metadata.VMRef{{Kind: "kubevirt", Namespace: "c", Name: "fedora"}, {Kind: "neonvm", Namespace: "b", Name: "db-owner"}, {Kind: "neonvm", Namespace: "b", Name: "db2"}}
	poll.Every(5*time.Millisecond).UntilTrue(t, 10*time.Second, fmt.Sprintf("watches of %v", want), func() bool { return slices.Equal(f.watched(), want) })
}

// listedPods is a lister that returns the same slice until set.
type listedPods struct {
	mu   sync.Mutex
	pods []metadata.Pod
}

func (l *listedPods) Pods(context.Context) ([]metadata.Pod, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pods, nil
}

// TestVMSizeChangesReachSizes: what a VM's watch reads reaches
// hold.MetaSource's Sizes: the VM's size when it is first read, its new
// use when it changes, nothing once it is deleted; and while nothing
// changes Sizes returns the very same set.
func TestVMSizeChangesReachSizes(t *testing.T) {
	f := newFakeWatches()
	v := newVMWatches(t.Context(), quiet, f.watch, servesAll, doubling(time.Millisecond, time.Millisecond))
	defer v.Close()
	pods := &listedPods{pods: []metadata.Pod{runner("p1", "a", "db")}}
	src := &hold.MetaSource{Lister: pods, Live: v}
	ctx := t.Context()
	sizeOf := func() (metadata.Size, bool) {
		set, err := src.Sizes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sz, ok, _ := set.DeclaredSize("p1")
		return sz, ok
	}
	if _, ok := sizeOf(); ok {
		t.Fatal("a size before the VM was read")
	}
	db := metadata.VMRef{Kind: "neonvm", Namespace: "a", Name: "db"}
	poll.Every(5*time.Millisecond).UntilTrue(t, 10*time.Second, "the watch of a/db started", func() bool { return f.sink(db) != nil })
	f.sink(db).set(neonVMObject("a", "db", int64(2)))
	if sz, ok := sizeOf(); !ok || sz != (metadata.Size{MilliCPU: 2000, Source: "neonvm"}) {
		t.Fatalf("size %+v %v, want 2000m from the VM", sz, ok)
	}
	s1, _ := src.Sizes(ctx)
	s2, _ := src.Sizes(ctx)
	if s1 != s2 {
		t.Error("Sizes built a new set with nothing changed")
	}
	// Changes: what the weight holder reads the sizes on.
	pending := func() bool {
		select {
		case <-v.Changes().C():
			return true
		default:
			return false
		}
	}
	if !pending() {
		t.Error("the VM's first read did not notify")
	}
	_, gen := v.VMs()
	f.sink(db).set(neonVMObject("a", "db", "2500m")) // NeonVM's autoscaler moves use
	if _, g := v.VMs(); g == gen {
		t.Error("the generation did not move with the VM's size")
	}
	if !pending() {
		t.Error("the VM's new size did not notify")
	}
	if sz, ok := sizeOf(); !ok || sz.MilliCPU != 2500 {
		t.Fatalf("size %+v %v after use 2500m, want 2500m", sz, ok)
	}
	// The same size again (a status update): no new generation.
	_, gen = v.VMs()
	f.sink(db).set(neonVMObject("a", "db", "2500m"))
	if _, g := v.VMs(); g != gen {
		t.Error("an unchanged VM moved the generation")
	}
	if pending() {
		t.Error("an unchanged VM notified")
	}
	// A size that does not read (min above max) drops the VM's size.
	bad := neonVMObject("a", "db", int64(2))
	bad["spec"].(map[string]any)["guest"].(map[string]any)["cpus"].(map[string]any)["min"] = int64(9)
	f.sink(db).set(bad)
	if sz, ok := sizeOf(); ok {
		t.Errorf("size %+v from a VM whose size does not read", sz)
	}
	f.sink(db).set(neonVMObject("a", "db", int64(3)))
	if sz, _ := sizeOf(); sz.MilliCPU != 3000 {
		t.Errorf("size %+v, want 3000m", sz)
	}
	pending() // the sizes above
	f.sink(db).unset()
	if !pending() {
		t.Error("the VM's deletion did not notify")
	}
	if sz, ok := sizeOf(); ok {
		t.Errorf("size %+v of a deleted VM", sz)
	}
	// A sink whose pod went no longer writes.
	old := f.sink(db)
	pods.mu.Lock()
	pods.pods = []metadata.Pod{}
	pods.mu.Unlock()
	sizeOf()
	old.set(neonVMObject("a", "db", int64(4)))
	if vms, _ := v.VMs(); len(vms) != 0 {
		t.Errorf("VMs %+v after their pod went", vms)
	}
}

// TestVMDiscoveryIsLazyAndUnlocked: discovery asks only for the kinds
// pods reference, outside the lock: Track and VMs answer while it hangs;
// a kind not served is asked again (backing off) and its VMs are watched
// once it is.
func TestVMDiscoveryIsLazyAndUnlocked(t *testing.T) {
	f := newFakeWatches()
	release := make(chan struct{})
	var mu sync.Mutex
	var asked []string
	disc := func(gvr schema.GroupVersionResource) (bool, error) {
		mu.Lock()
		asked = append(asked, gvr.Group)
		n := len(asked)
		mu.Unlock()
		if n == 1 {
			<-release // an API server that does not answer
		}
		return n >= 3, nil // absent twice, then installed
	}
	v := newVMWatches(t.Context(), quiet, f.watch, disc, doubling(time.Millisecond, 4*time.Millisecond))
	defer v.Close()
	askedNow := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(asked)
	}
	v.Track([]metadata.Pod{{UID: "p0", Namespace: "a", Name: "web"}})
	v.Track([]metadata.Pod{runner("p1", "a", "db")})
	poll.Every(5*time.Millisecond).UntilTrue(t, 10*time.Second, "discovery asked", func() bool { return len(askedNow()) == 1 })
	done := make(chan struct{})
	go func() {
		v.Track([]metadata.Pod{runner("p1", "a", "db"), runner("p2", "a", "db")})
		v.VMs()
		v.Watches()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Track and VMs wait for discovery")
	}
	close(release)
	db := metadata.VMRef{Kind: "neonvm", Namespace: "a", Name: "db"}
	poll.Every(5*time.Millisecond).UntilTrue(t, 10*time.Second, "the watch of a/db started once the kind is served", func() bool { return f.sink(db) != nil })
	if got := askedNow(); !slices.Equal(got, []string{"vm.neon.tech", "vm.neon.tech", "vm.neon.tech"}) {
		t.Errorf("discovery asked %v, want vm.neon.tech three times (KubeVirt is referenced by no pod)", got)
	}
}

func TestBackoffReachesTenMinutes(t *testing.T) {
	b := doubling(discoveryFirst, discoveryMax)
	var got []time.Duration
	for range 8 {
		got = append(got, b.Step())
	}
	want := []time.Duration{15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	if !slices.Equal(got, want) {
		t.Errorf("delays %v, want %v", got, want)
	}
}

var vmGVR = schema.GroupVersionResource{Group: "vm.neon.tech", Version: "v1", Resource: "virtualmachines"}

// TestNodeWatchesItsPodsVMsThroughTheClients: the pod informer and the
// VM watches through client-go's clients (fakes of the API server): the
// runner pod's VM is listed and watched by name in the pod's namespace, an
// unrelated VM is never listed, a use change reaches Sizes, and deleting
// the pod forgets the VM.
func TestNodeWatchesItsPodsVMsThroughTheClients(t *testing.T) {
	ctx := t.Context()
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{vmGVR: "VirtualMachineList"},
		&unstructured.Unstructured{Object: neonVMObject("a", "db", int64(2))},
		&unstructured.Unstructured{Object: neonVMObject("a", "other", int64(6))})
	v := newVMWatches(ctx, quiet, dynamicWatch(dyn), servesAll, doubling(time.Millisecond, time.Millisecond))
	defer v.Close()
	runnerPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db-runner", Namespace: "a", UID: types.UID("p1"), Labels: map[string]string{vmsize.LabelNeonVM: "db"}},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "neonvm-runner"}}},
	}
	cs := fake.NewClientset(runnerPod)
	k, err := NewKubernetes(ctx, cs.CoreV1().Pods(""), "node-a", 10*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	src := &hold.MetaSource{Lister: k, Live: v}
	size := func() int64 {
		set, err := src.Sizes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sz, _, _ := set.DeclaredSize("p1")
		return sz.MilliCPU
	}
	poll.Every(5*time.Millisecond).UntilTrue(t, 10*time.Second, "the VM's size 2000m", func() bool { return size() == 2000 })
	for _, a := range dyn.Actions() {
		var fs string
		switch act := a.(type) {
		case k8stesting.ListAction:
			fs = act.GetListRestrictions().Fields.String()
		case k8stesting.WatchAction:
			fs = act.GetWatchRestrictions().Fields.String()
		default:
			continue
		}
		if a.GetNamespace() != "a" || fs != "metadata.name=db" {
			t.Errorf("%s in namespace %q with field selector %q, want namespace a and metadata.name=db", a.GetVerb(), a.GetNamespace(), fs)
		}
	}
	u, err := dyn.Resource(vmGVR).Namespace("a").Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, "3500m", "spec", "guest", "cpus", "use"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(vmGVR).Namespace("a").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Every(5*time.Millisecond).UntilTrue(t, 10*time.Second, "the VM's new use 3500m", func() bool { return size() == 3500 })
	if vms, _ := v.VMs(); len(vms) != 1 || vms[0].Name != "db" {
		t.Errorf("VMs %+v, want db only", vms)
	}
	if err := cs.CoreV1().Pods("a").Delete(ctx, "db-runner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Every(5*time.Millisecond).UntilTrue(t, 10*time.Second, "the VM forgotten with its pod", func() bool {
		size()
		vms, _ := v.VMs()
		return len(vms) == 0 && v.Watches() == 0
	})
}

// TestKubeSourceSliceChangesOnlyWithMetadata: Pods returns the very same
// slice until a pod's metadata changes; a status change cgwarden does not
// read leaves it as it is.
func TestKubeSourceSliceChangesOnlyWithMetadata(t *testing.T) {
	ctx := t.Context()
	p := apiPod("web", "u1", "node-a", spinCtr)
	cs := fake.NewClientset(p)
	k, err := NewKubernetes(ctx, cs.CoreV1().Pods(""), "node-a", 10*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	first, _ := k.Pods(ctx)
	again, _ := k.Pods(ctx)
	if len(first) != 1 || &first[0] != &again[0] {
		t.Fatalf("two calls, two slices: %p %p", first, again)
	}
	// A condition (not read) changes, then a label (read).
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	p.ResourceVersion = "2"
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Labels = map[string]string{vmsize.LabelNeonVM: "db"}
	p.ResourceVersion = "3"
	if _, err := cs.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var now []metadata.Pod
	poll.Every(5*time.Millisecond).UntilTrue(t, 10*time.Second, "the new label", func() bool {
		now, _ = k.Pods(ctx)
		return len(now) == 1 && now[0].Labels[vmsize.LabelNeonVM] == "db"
	})
	if &now[0] == &first[0] {
		t.Error("a label changed and the slice did not")
	}
	if first[0].Labels[vmsize.LabelNeonVM] != "" {
		t.Error("the slice handed out earlier was changed")
	}
}

// TestRefusedVMReadsAreSaidAndGiveNoSize: the API server refuses the
// agent the VMs of namespace b (403: the chart's metadata.vmNamespaces
// names only a). The VM of a is read; b's gives its pod no size, is
// counted by Refused and logged once however often the informer retries;
// once the API server allows it, its size is read and it is no longer
// counted.
func TestRefusedVMReadsAreSaidAndGiveNoSize(t *testing.T) {
	ctx := t.Context()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{vmGVR: "VirtualMachineList"},
		&unstructured.Unstructured{Object: neonVMObject("a", "db", int64(2))},
		&unstructured.Unstructured{Object: neonVMObject("b", "db", int64(3))})
	var allowB atomic.Bool
	refuse := func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "b" && !allowB.Load() {
			return true, nil, apierrors.NewForbidden(vmGVR.GroupResource(), "", errors.New(`User "system:serviceaccount:cgwarden-system:cgwarden" cannot list resource "virtualmachines" in API group "vm.neon.tech" in the namespace "b"`))
		}
		return false, nil, nil
	}
	dyn.PrependReactor("list", "virtualmachines", refuse)
	dyn.PrependWatchReactor("virtualmachines", func(a k8stesting.Action) (bool, watch.Interface, error) {
		handled, _, err := refuse(a)
		return handled, nil, err
	})
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logged}, nil))
	v := newVMWatches(ctx, log, dynamicWatch(dyn), servesAll, doubling(time.Millisecond, time.Millisecond))
	defer v.Close()
	runner := func(ns string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "db-runner", Namespace: ns, UID: types.UID("p-" + ns), Labels: map[string]string{vmsize.LabelNeonVM: "db"}},
			Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "neonvm-runner"}}},
		}
	}
	k, err := NewKubernetes(ctx, fake.NewClientset(runner("a"), runner("b")).CoreV1().Pods(""), "node-a", 10*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	src := &hold.MetaSource{Lister: k, Live: v}
	sizes := func() (a, b int64) {
		set, err := src.Sizes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sa, _, _ := set.DeclaredSize("p-a")
		sb, _, _ := set.DeclaredSize("p-b")
		return sa.MilliCPU, sb.MilliCPU
	}
	poll.Every(5*time.Millisecond).UntilTrue(t, 10*time.Second, "a's VM read and b's refused", func() bool {
		a, _ := sizes()
		return a == 2000 && v.Refused() == 1
	})
	poll.Every(5*time.Millisecond).UntilTrue(t, 10*time.Second, "b's list retried", func() bool {
		n := 0
		for _, a := range dyn.Actions() {
			if a.GetVerb() == "list" && a.GetNamespace() == "b" {
				n++
			}
		}
		return n >= 2
	})
	if _, b := sizes(); b != 0 {
		t.Errorf("b's pod sized %dm from a VM the agent may not read", b)
	}
	if n := strings.Count(logged.String(), "refuses this agent the VM object"); n != 1 {
		t.Errorf("the refusal logged %d times, want once:\n%s", n, logged.String())
	}
	if !strings.Contains(logged.String(), "object=b/db") {
		t.Errorf("the log does not name b/db:\n%s", logged.String())
	}
	allowB.Store(true)
	poll.Every(5*time.Millisecond).UntilTrue(t, 30*time.Second, "b's VM read once allowed", func() bool {
		_, b := sizes()
		return b == 3000 && v.Refused() == 0
	})
}

// TestRefusedVMNotThereOnceAllowed: a VM refused (403) and then allowed
// while it is not there (deleted meanwhile) is no longer counted as
// refused: an answered list clears it, whatever it lists.
func TestRefusedVMNotThereOnceAllowed(t *testing.T) {
	ctx := t.Context()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{vmGVR: "VirtualMachineList"})
	var allow atomic.Bool
	dyn.PrependReactor("list", "virtualmachines", func(k8stesting.Action) (bool, runtime.Object, error) {
		if allow.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(vmGVR.GroupResource(), "", errors.New("forbidden"))
	})
	v := newVMWatches(ctx, quiet, dynamicWatch(dyn), servesAll, doubling(time.Millisecond, time.Millisecond))
	defer v.Close()
	v.Track([]metadata.Pod{{UID: "p", Namespace: "b", Name: "db-runner", Labels: map[string]string{vmsize.LabelNeonVM: "db"}}})
	poll.Every(5*time.Millisecond).UntilTrue(t, 10*time.Second, "b/db refused", func() bool { return v.Refused() == 1 })
	allow.Store(true)
	poll.Every(5*time.Millisecond).UntilTrue(t, 60*time.Second, "b/db no longer counted once its list is answered (empty)", func() bool { return v.Refused() == 0 })
	if vms, _ := v.VMs(); len(vms) != 0 {
		t.Errorf("VMs %+v from an empty list", vms)
	}
}

// lockedWriter serialises writes of the watches' goroutines to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
