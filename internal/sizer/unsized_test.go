package sizer

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// Issue 39: under overload the webhook admits a pod unsized
// (failurePolicy Ignore), and the resize path sizes it later. Three runner
// pods admitted without a CPU request: a Burstable one (a memory request)
// gets its container's request added by one resize PATCH, one with
// pod-level memory gets the pod's, and a BestEffort one, whose class no
// resize may change, gets one CPUNotSized Event and no PATCH. Before, the
// two Burstable ones were reported CPUNotSized and never sized.
func TestControllerSizesPodsAdmittedUnsized(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}}}
	burstable := unsizedRunner(corev1.PodQOSBurstable)
	podLevel := unsizedRunner(corev1.PodQOSBurstable)
	podLevel.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	podLevel.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}}
	bestEffort := runningRunner("", "")
	sizes := map[string]string{"burstable": "1500m", "podlevel": "2", "besteffort": "1"}
	pods := map[string]*corev1.Pod{"burstable": burstable, "podlevel": podLevel, "besteffort": bestEffort}
	objs := []runtime.Object{node}
	var vms []runtime.Object
	for name, p := range pods {
		p.Name, p.UID, p.Labels = name+"-runner", types.UID("uid-"+name), map[string]string{"vm.neon.tech/name": name}
		p.OwnerReferences[0].Name = name
		p.Spec.NodeName = "n1"
		objs = append(objs, p)
		v := vm(sizes[name])
		v.SetName(name)
		_ = unstructured.SetNestedField(v.Object, p.Name, "status", "podName")
		vms = append(vms, v)
	}
	cs := fake.NewClientset(objs...)
	var mu sync.Mutex
	patches := map[string][]string{}
	cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		mu.Lock()
		patches[pa.GetName()] = append(patches[pa.GetName()], pa.GetSubresource()+" "+string(pa.GetPatch()))
		mu.Unlock()
		return false, nil, nil // the tracker applies it, as the API server would
	})
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{VirtualMachines: "VirtualMachineList"}, vms...)
	events := record.NewFakeRecorder(20)
	c := &Controller{Client: cs, Dynamic: dyn, Events: events, Log: slog.New(slog.DiscardHandler), Coalesce: 20 * time.Millisecond,
		crdCheck: func() (bool, error) { return true, nil }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	cpuOf := func(name string) (container, pod string, err error) {
		p, err := cs.CoreV1().Pods("ns").Get(ctx, name+"-runner", metav1.GetOptions{})
		if err != nil {
			return "", "", err
		}
		if q, ok := p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; ok {
			container = q.String()
		}
		if p.Spec.Resources != nil {
			if q, ok := p.Spec.Resources.Requests[corev1.ResourceCPU]; ok {
				pod = q.String()
			}
			if _, ok := p.Spec.Resources.Requests[corev1.ResourceMemory]; !ok {
				return "", "", fmt.Errorf("%s lost its pod-level memory request", p.Name)
			}
		}
		return container, pod, nil
	}
	poll.Every(10*time.Millisecond).Until(t, 10*time.Second, "both Burstable pods sized", func() (bool, string, error) {
		bc, bp, err := cpuOf("burstable")
		if err != nil {
			return false, err.Error(), nil
		}
		pc, pp, err := cpuOf("podlevel")
		if err != nil {
			return false, err.Error(), nil
		}
		return bc == "1500m" && bp == "" && pc == "" && pp == "2",
			fmt.Sprintf("burstable: container %q pod %q; podlevel: container %q pod %q", bc, bp, pc, pp), nil
	})
	// Every pod's first sync is done once the three have an Event each.
	poll.Every(10*time.Millisecond).Until(t, 5*time.Second, "an Event for each pod", func() (bool, string, error) {
		return len(events.Events) >= 3, fmt.Sprintf("%d Events", len(events.Events)), nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string][]string{
		"burstable-runner": {`resize {"spec":{"containers":[{"name":"neonvm-runner","resources":{"requests":{"cpu":"1500m"}}}]}}`},
		"podlevel-runner":  {`resize {"spec":{"resources":{"requests":{"cpu":"2"}}}}`},
	}
	if fmt.Sprint(patches) != fmt.Sprint(want) {
		t.Errorf("PATCHes %q, want %q (none of the BestEffort pod)", patches, want)
	}
	var got []string
	for len(events.Events) > 0 {
		got = append(got, <-events.Events)
	}
	all := strings.Join(got, "\n")
	for _, w := range []string{"CPUResized CPU request none → 1500m on container neonvm-runner", "CPUResized CPU request none → 2 on the pod", ReasonNotSized} {
		if !strings.Contains(all, w) {
			t.Errorf("Events %q: none with %q", got, w)
		}
	}
	if n := strings.Count(all, ReasonNotSized); n != 1 {
		t.Errorf("Events %q: %d %s, want 1 (the BestEffort pod)", got, n, ReasonNotSized)
	}
}

// countingIndexer counts the objects its index lookups and lists hand
// back: what a caller then looks at one by one.
type countingIndexer struct {
	cache.Indexer
	mu     sync.Mutex
	handed int
}

func (c *countingIndexer) count(objs []any, err error) ([]any, error) {
	c.mu.Lock()
	c.handed += len(objs)
	c.mu.Unlock()
	return objs, err
}

func (c *countingIndexer) Index(name string, obj any) ([]any, error) {
	return c.count(c.Indexer.Index(name, obj))
}

func (c *countingIndexer) ByIndex(name, value string) ([]any, error) {
	return c.count(c.Indexer.ByIndex(name, value))
}

func (c *countingIndexer) List() []any {
	objs, _ := c.count(c.Indexer.List(), nil)
	return objs
}

// A sync looks at its VM's pods, not at every pod of the VM's namespace:
// with 2,000 VMs and runner pods in one namespace, the syncs of all of
// them are handed 2,000 pods in all (one each), where a label-filtered
// list of the namespace (the pod lister's) is handed 2,000 × 2,000 = 4
// million: the first pass after a start or a failover grew as the square
// of one namespace's VMs (167 s at 20,000 VMs, docs/scale.md).
func TestSyncLooksOnlyAtItsVMsPods(t *testing.T) {
	const n = 2000
	pods := &countingIndexer{Indexer: cache.NewIndexer(cache.MetaNamespaceKeyFunc,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, podsByVM: podVMKey})}
	vms := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	keys := make([]string, n)
	for i := range n {
		name := fmt.Sprintf("vm%05d", i)
		p := runningRunner("1", "")
		p.Name, p.UID, p.Labels = name+"-runner", types.UID("uid-"+name), map[string]string{"vm.neon.tech/name": name}
		if err := pods.Add(p); err != nil {
			t.Fatal(err)
		}
		v := vm("1")
		v.SetName(name)
		_ = unstructured.SetNestedField(v.Object, p.Name, "status", "podName")
		if err := vms.Add(v); err != nil {
			t.Fatal(err)
		}
		keys[i] = "ns/" + name
	}
	c := &Controller{Log: slog.New(slog.DiscardHandler), reported: map[types.UID]string{},
		vms: cache.NewGenericLister(vms, VirtualMachines.GroupResource()), pods: pods}
	pods.handed = 0
	for _, k := range keys {
		if err := c.sync(context.Background(), k, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if pods.handed != n {
		t.Errorf("the syncs of %d VMs, one runner pod each, in one namespace looked at %d pods; want %d (one each)", n, pods.handed, n)
	}
}
