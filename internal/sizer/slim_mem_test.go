package sizer

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// footprintCopies is how many VMs (each a VirtualMachine and its runner
// pod) the footprint test keeps.
const footprintCopies = 1000

// The slim informer caches hold a fraction of what whole objects would:
// the heap an informer's store keeps for 1,000 VirtualMachines and their
// runner pods (the testdata fixtures, managedFields and all), with and
// without the transforms. docs/benchmarks.md records the figures.
func TestSlimCachesRetainLess(t *testing.T) {
	podJSON, err := os.ReadFile("testdata/runner-pod.json")
	if err != nil {
		t.Fatal(err)
	}
	vmJSON, err := os.ReadFile("testdata/virtualmachine.json")
	if err != nil {
		t.Fatal(err)
	}
	pods := func(transform cache.TransformFunc) func(int) (any, error) {
		return func(i int) (any, error) { return decodePod(podJSON, i, transform) }
	}
	vms := func(transform cache.TransformFunc) func(int) (any, error) {
		return func(i int) (any, error) { return decodeVM(vmJSON, i, transform) }
	}
	wholePod := footprint(t, footprintCopies, pods(nil))
	slimPodB := footprint(t, footprintCopies, pods(slimRunnerPod))
	wholeVM := footprint(t, footprintCopies, vms(nil))
	slimVMB := footprint(t, footprintCopies, vms(vmsize.Slim))
	whole, slim := wholePod+wholeVM, slimPodB+slimVMB
	t.Logf("bytes retained per runner pod: %d whole, %d slim (%.2f)", wholePod, slimPodB, ratio(slimPodB, wholePod))
	t.Logf("bytes retained per VirtualMachine: %d whole, %d slim (%.2f)", wholeVM, slimVMB, ratio(slimVMB, wholeVM))
	t.Logf("bytes retained per VM (VirtualMachine + runner pod, %d copies): %d whole, %d slim: %.2f of whole (%.1f× less)",
		footprintCopies, whole, slim, ratio(slim, whole), ratio(whole, slim))
	if slim*3 > whole {
		t.Errorf("slim caches keep %d bytes per VM against %d whole: want at most a third", slim, whole)
	}
}

// footprint is the live heap, in bytes per object, that a store keyed and
// indexed as the informers' stores are (by namespace/name, indexed by
// namespace) holds after n objects made by decode were added, measured
// with runtime.MemStats after forced collections; decode's garbage (a
// whole object a transform slimmed) is collected before the measurement.
func footprint(t *testing.T, n int, decode func(i int) (any, error)) int64 {
	t.Helper()
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	before := liveHeap()
	for i := range n {
		obj, err := decode(i)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	after := liveHeap()
	runtime.KeepAlive(store)
	return (int64(after) - int64(before)) / int64(n)
}

// liveHeap is the heap in use after two forced collections (the second
// frees what finalizers of the first kept).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// decodePod decodes the runner pod fixture as a watch event's object
// (fresh strings, as a reflector's decoder makes them), the i-th copy
// named and identified apart, and passes it through transform if given.
func decodePod(raw []byte, i int, transform cache.TransformFunc) (any, error) {
	p := &corev1.Pod{}
	if err := json.Unmarshal(raw, p); err != nil {
		return nil, err
	}
	p.Name = fmt.Sprintf("%s-%d", p.Name, i)
	p.UID = types.UID(fmt.Sprintf("%s-%d", p.UID, i))
	return transformed(p, transform)
}

// decodeVM is decodePod for the VirtualMachine fixture (an unstructured
// object, as the dynamic informer decodes it).
func decodeVM(raw []byte, i int, transform cache.TransformFunc) (any, error) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return nil, err
	}
	u.SetName(fmt.Sprintf("%s-%d", u.GetName(), i))
	u.SetUID(types.UID(fmt.Sprintf("%s-%d", u.GetUID(), i)))
	return transformed(u, transform)
}

func transformed(obj any, transform cache.TransformFunc) (any, error) {
	if transform == nil {
		return obj, nil
	}
	return transform(obj)
}

func ratio(a, b int64) float64 { return float64(a) / float64(b) }
