package podsource

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/cgwarden/cgwarden/internal/apiconn"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// The VM objects whose sizes cgwarden reads, by metadata.VM.Kind: NeonVM
// VirtualMachines (their spec.guest.cpus.use moves under NeonVM's
// autoscaler) and KubeVirt VirtualMachineInstances.
var vmResources = map[string]schema.GroupVersionResource{
	"neonvm":   {Group: "vm.neon.tech", Version: "v1", Resource: "virtualmachines"},
	"kubevirt": {Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"},
}

// Discovery of a VM kind the API server does not serve is retried after
// discoveryFirst, then twice as long each time up to discoveryMax.
const (
	discoveryFirst = 15 * time.Second
	discoveryMax   = 10 * time.Minute
)

// VMWatches keeps the VM objects that this node's pods reference, each
// with a watch of its own — the kubelet's way with the Secrets and
// ConfigMaps its pods use (pkg/kubelet/util/manager, watch_based_manager):
// one list+watch per object, in the pod's namespace with the field
// selector metadata.name=<name>, counted by the pods that reference it,
// started with the first reference and stopped with the last. An agent's
// VM traffic and memory then grow with its own node's VMs, not the
// cluster's: a VM's size change reaches the agents of the nodes that run
// it, no other.
//
// KubeVirt VMIs are watched the same way rather than by their
// kubevirt.io/nodeName label: a migrating VMI has a virt-launcher pod on
// the target node while its label still names the source, and one
// mechanism for both kinds is one to test.
//
// Track (called with the node's pods when they change) sets the
// references; VMs returns the VMs read so far and a generation that
// changes with them. Discovery of a kind runs only once a pod references
// a VM of it, in a goroutine of its own (never under a lock Track or VMs
// take), and a kind the API server does not serve is looked for again
// with a backoff up to 10 minutes.
type VMWatches struct {
	ctx    context.Context
	cancel context.CancelFunc
	log    *slog.Logger
	// watch starts the watch of one VM object, feeding it to sink; stop
	// ends it. disc says whether the API server serves a kind's resource.
	watch func(ctx context.Context, ref metadata.VMRef, sink vmSink)
	disc  func(gvr schema.GroupVersionResource) (bool, error)
	// poke wakes the discovery goroutine.
	poke chan struct{}

	mu sync.Mutex
	// pods are the references of each pod, by UID.
	pods  map[string][]metadata.VMRef
	items map[metadata.VMRef]*vmItem
	// served are the kinds discovery found.
	served map[string]bool
	gen    uint64
	// list is what VMs returns, rebuilt when listGen falls behind gen.
	list    []metadata.VM
	listGen uint64
	// changes is notified whenever gen moves (changed).
	changes *metadata.Changes
}

// vmItem is one referenced VM object.
type vmItem struct {
	refs int
	// stop ends its watch; nil while its kind is not served.
	stop context.CancelFunc
	vm   *metadata.VM
	// bad is why the object's size does not read, logged once per reason.
	bad string
	// forbidden is whether the last list of it was refused (403).
	forbidden bool
}

// vmSink receives one watched object's state: set with the object as
// read, unset when it is gone.
type vmSink interface {
	set(obj map[string]any)
	unset()
	// refused says the API server refused the agent this VM (403): its
	// identity may not read the VM's namespace (the chart's
	// metadata.vmNamespaces, docs/security.md); allowed, that a list of
	// it was answered (the VM may still be absent).
	refused(err error)
	allowed()
}

// OpenVMWatches returns VMWatches reading from the API server of rc. It
// watches nothing until Track names VMs.
func OpenVMWatches(ctx context.Context, rc *rest.Config, log *slog.Logger) (*VMWatches, error) {
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	// Discovery must not hang on an API server that went away.
	dc := rest.CopyConfig(rc)
	dc.Timeout = 10 * time.Second
	disc, err := rest.UnversionedRESTClientFor(withJSON(dc))
	if err != nil {
		return nil, err
	}
	return newVMWatches(ctx, log, dynamicWatch(dyn), serves(disc), doubling(discoveryFirst, discoveryMax)), nil
}

func newVMWatches(ctx context.Context, log *slog.Logger, watch func(context.Context, metadata.VMRef, vmSink), disc func(schema.GroupVersionResource) (bool, error), retry wait.Backoff) *VMWatches {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(ctx)
	v := &VMWatches{ctx: ctx, cancel: cancel, log: log.With("component", "vms"), watch: watch, disc: disc, poke: make(chan struct{}, 1),
		pods: map[string][]metadata.VMRef{}, items: map[metadata.VMRef]*vmItem{}, served: map[string]bool{}, list: []metadata.VM{},
		changes: metadata.NewChanges()}
	go v.discover(retry)
	return v
}

// changed moves the generation on (v.mu held) and says so on Changes.
func (v *VMWatches) changed() {
	v.gen++
	v.changes.Notify()
}

// Changes is notified whenever the VMs read change (VMs then returns a
// new generation).
func (v *VMWatches) Changes() *metadata.Changes { return v.changes }

// Close stops every watch and the discovery.
func (v *VMWatches) Close() { v.cancel() }

// Track sets the pods whose VMs are watched: each pod's references
// (metadata.VMRefs) are counted, a VM's watch starts with its first
// reference and stops with its last. A pod's new references are counted
// before its old ones are dropped, so a VM it keeps is not re-listed. It
// returns at once: watches start in the background.
func (v *VMWatches) Track(pods []metadata.Pod) {
	v.mu.Lock()
	defer v.mu.Unlock()
	seen := make(map[string]bool, len(pods))
	wake := false
	for i := range pods {
		p := &pods[i]
		seen[p.UID] = true
		refs := metadata.VMRefs(p)
		old := v.pods[p.UID]
		if slices.Equal(refs, old) {
			continue
		}
		for _, r := range refs {
			wake = v.addRef(r) || wake
		}
		for _, r := range old {
			v.dropRef(r)
		}
		if len(refs) == 0 {
			delete(v.pods, p.UID)
		} else {
			v.pods[p.UID] = refs
		}
	}
	for uid, refs := range v.pods {
		if !seen[uid] {
			for _, r := range refs {
				v.dropRef(r)
			}
			delete(v.pods, uid)
		}
	}
	if wake {
		select {
		case v.poke <- struct{}{}:
		default:
		}
	}
}

// addRef counts a reference; it reports a new VM of a kind not known to
// be served (discovery has work).
func (v *VMWatches) addRef(r metadata.VMRef) bool {
	it, ok := v.items[r]
	if ok {
		it.refs++
		return false
	}
	it = &vmItem{refs: 1}
	v.items[r] = it
	if v.served[r.Kind] {
		v.start(r, it)
		return false
	}
	return true
}

func (v *VMWatches) dropRef(r metadata.VMRef) {
	it, ok := v.items[r]
	if !ok {
		return
	}
	if it.refs--; it.refs > 0 {
		return
	}
	if it.stop != nil {
		it.stop()
	}
	delete(v.items, r)
	if it.vm != nil {
		v.changed()
	}
}

// start runs the watch of one VM (v.mu held).
func (v *VMWatches) start(r metadata.VMRef, it *vmItem) {
	ctx, stop := context.WithCancel(v.ctx)
	it.stop = stop
	go v.watch(ctx, r, itemSink{v, r, it})
}

// itemSink records what a VM's watch reads on its item, if the item is
// still the one referenced.
type itemSink struct {
	v   *VMWatches
	ref metadata.VMRef
	it  *vmItem
}

func (s itemSink) set(obj map[string]any) {
	vm, err := vmsize.FromObject(obj, vmsize.Live)
	if s.record(vm, err) {
		s.v.log.Warn("VM object without a usable size", "kind", s.ref.Kind, "object", s.ref.Namespace+"/"+s.ref.Name, "err", err)
	}
}

// record notes what was read of the VM; it reports an error not seen
// before, for the caller to log (outside the lock).
func (s itemSink) record(vm metadata.VM, err error) (newErr bool) {
	s.v.mu.Lock()
	defer s.v.mu.Unlock()
	if s.v.items[s.ref] != s.it {
		return false // no pod references it any more
	}
	switch {
	case err != nil:
		newErr = s.it.bad != err.Error()
		s.it.bad = err.Error()
		if s.it.vm != nil {
			s.it.vm = nil
			s.v.changed()
		}
	case s.it.vm == nil || !s.it.vm.Equal(vm):
		s.it.vm, s.it.bad = &vm, ""
		s.v.changed()
	}
	s.it.forbidden = false
	return newErr
}

func (s itemSink) refused(err error) {
	s.v.mu.Lock()
	ours := s.v.items[s.ref] == s.it
	first := ours && !s.it.forbidden
	if ours {
		s.it.forbidden = true
		if s.it.vm != nil { // read before, refused now: unknown
			s.it.vm = nil
			s.v.changed()
		}
	}
	s.v.mu.Unlock()
	if first {
		s.v.log.Warn("the API server refuses this agent the VM object: its pod gets no size from it (the tier's default weight) until the agent may read VM objects of the namespace (the chart's metadata.vmNamespaces)",
			"kind", s.ref.Kind, "object", s.ref.Namespace+"/"+s.ref.Name, "err", err)
	}
}

func (s itemSink) allowed() {
	s.v.mu.Lock()
	defer s.v.mu.Unlock()
	if s.v.items[s.ref] == s.it {
		s.it.forbidden = false
	}
}

func (s itemSink) unset() {
	s.v.mu.Lock()
	defer s.v.mu.Unlock()
	if s.v.items[s.ref] == s.it && s.it.vm != nil {
		s.it.vm = nil
		s.v.changed()
	}
}

// VMs returns the VMs read so far, sorted, and a generation that changes
// whenever they do; the slice is the same (and must not be changed) while
// the generation is.
func (v *VMWatches) VMs() ([]metadata.VM, uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.listGen != v.gen {
		list := make([]metadata.VM, 0, len(v.items))
		for _, it := range v.items {
			if it.vm != nil {
				list = append(list, *it.vm)
			}
		}
		slices.SortFunc(list, func(a, b metadata.VM) int {
			return strings.Compare(a.Kind+"/"+a.Namespace+"/"+a.Name, b.Kind+"/"+b.Namespace+"/"+b.Name)
		})
		v.list, v.listGen = list, v.gen
	}
	return v.list, v.gen
}

// Watches is the number of VM objects being watched: one list+watch on
// the API server each.
func (v *VMWatches) Watches() int { return v.count(func(it *vmItem) bool { return it.stop != nil }) }

// Refused is the number of VM objects whose last read the API server
// refused (403): pods that reference them get no size from them.
func (v *VMWatches) Refused() int { return v.count(func(it *vmItem) bool { return it.forbidden }) }

// count is the number of VM objects whose item f holds for.
func (v *VMWatches) count(f func(*vmItem) bool) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, it := range v.items {
		if f(it) {
			n++
		}
	}
	return n
}

// discover looks for the VM kinds that pods reference and the API server
// was not yet seen to serve, and starts their watches when it is. It
// calls the API server with no lock held.
func (v *VMWatches) discover(delay wait.Backoff) {
	var retry <-chan time.Time
	// earliest is when discovery may ask again after a kind was missing:
	// pods that come and go do not hurry it.
	var earliest time.Time
	for {
		select {
		case <-v.ctx.Done():
			return
		case <-v.poke:
			if retry != nil {
				continue // a retry is due already
			}
			if wait := time.Until(earliest); wait > 0 {
				retry = time.After(wait)
				continue
			}
		case <-retry:
			retry = nil
		}
		missing := false
		for kind, gvr := range vmResources {
			if !v.wanted(kind) {
				continue
			}
			ok, err := v.disc(gvr)
			if err != nil {
				v.log.Debug("VM kind not discovered", "resource", gvr.Resource, "group", gvr.Group, "err", err)
			}
			if !ok {
				missing = true
				continue
			}
			v.serve(kind)
			v.log.Info("watching the VM objects this node's pods reference", "resource", gvr.Resource, "group", gvr.Group)
		}
		if missing {
			d := delay.Step()
			v.log.Debug("VM kinds referenced but not served; looking again later", "after", d)
			retry, earliest = time.After(d), time.Now().Add(d)
		}
	}
}

// wanted reports whether a pod references a VM of kind, not yet known to
// be served.
func (v *VMWatches) wanted(kind string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.served[kind] {
		return false
	}
	for r := range v.items {
		if r.Kind == kind {
			return true
		}
	}
	return false
}

// serve notes that kind is served and starts its referenced VMs' watches.
func (v *VMWatches) serve(kind string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.served[kind] = true
	for r, it := range v.items {
		if r.Kind == kind && it.stop == nil {
			v.start(r, it)
		}
	}
}

// doubling is an exponential delay: first, then doubled each time up to
// limit.
func doubling(first, limit time.Duration) wait.Backoff {
	return wait.Backoff{Duration: first, Factor: 2, Cap: limit, Steps: math.MaxInt32}
}

// serves asks discovery whether the API server serves gvr: a GET of its
// group version's resource list (/apis/<group>/<version>), what
// client-go's discovery client's ServerResourcesForGroupVersion does;
// that client is not used because it imports client-go's whole scheme
// (apiconn.Client says why that matters). A group version not served is
// an error (404), as there.
func serves(c rest.Interface) func(schema.GroupVersionResource) (bool, error) {
	return func(gvr schema.GroupVersionResource) (bool, error) {
		raw, err := c.Get().AbsPath("/apis", gvr.Group, gvr.Version).SetHeader("Accept", "application/json").DoRaw(context.Background())
		if err != nil {
			return false, err
		}
		var list metav1.APIResourceList
		if err := json.Unmarshal(raw, &list); err != nil {
			return false, fmt.Errorf("discovery of %s: %w", gvr.GroupVersion(), err)
		}
		return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == gvr.Resource }), nil
	}
}

// withJSON is c for a client that only reads discovery documents as
// JSON (an unversioned client needs a serializer, and uses none here).
func withJSON(c *rest.Config) *rest.Config {
	c = rest.CopyConfig(c)
	c.NegotiatedSerializer = serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return c
}

// dynamicWatch watches one VM object through the dynamic client: a
// list+watch in its namespace with the field selector metadata.name, the
// object slimmed to what vmsize.FromObject reads (vmsize.Slim) before it is
// stored.
func dynamicWatch(dyn dynamic.Interface) func(context.Context, metadata.VMRef, vmSink) {
	return func(ctx context.Context, ref metadata.VMRef, sink vmSink) {
		res := dyn.Resource(vmResources[ref.Kind]).Namespace(ref.Namespace)
		list := func(ctx context.Context, o metav1.ListOptions) (*unstructured.UnstructuredList, error) {
			l, err := res.List(ctx, o)
			switch {
			case err == nil:
				sink.allowed()
			case apierrors.IsForbidden(err):
				sink.refused(err)
			}
			return l, err
		}
		set := func(u *unstructured.Unstructured) { sink.set(u.Object) }
		apiconn.WatchOne(ref.Name, list, res.Watch, vmsize.Slim, set, sink.unset).RunWithContext(ctx)
	}
}
