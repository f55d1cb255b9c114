package sizer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// VirtualMachines is NeonVM's VirtualMachine resource.
var VirtualMachines = schema.GroupVersionResource{Group: vmsize.NeonVMGroup, Version: "v1", Resource: "virtualmachines"}

// Event reasons the controller records on pods.
const (
	ReasonResized     = "CPUResized"
	ReasonResizeError = "CPUResizeFailed"
	ReasonPending     = "CPUResizePending"
	ReasonNotSized    = "CPUNotSized"
)

// Controller keeps each running NeonVM runner pod's CPU request equal to its
// VirtualMachine's spec.guest.cpus.use, through the pod's resize
// subresource.
type Controller struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	Events  record.EventRecorder
	Log     *slog.Logger
	Metrics *Metrics
	// Coalesce is a trailing debounce per VM: a VM is resized Coalesce
	// after its last change, to its size then (NeonVM's autoscaler moves
	// use often, and only the last value is applied), but no later than
	// MaxDelay after the first change of a burst (default 5×Coalesce).
	Coalesce, MaxDelay time.Duration
	// MinStep: a resize smaller than this many milli-CPU is not made (0:
	// every change). A pod below its cap (its node's allocatable CPU, or
	// its namespace's --max-size bound if lower) is still raised to it.
	MinStep int64
	// Workers sync that many VMs at once (default 8): each sync is one
	// PATCH, so throughput is bounded by the client's QPS, not by one
	// round trip at a time.
	Workers int
	// EventWindow: at most one Event per pod and reason per window
	// (default 10 minutes); the rest are counted on /metrics.
	EventWindow time.Duration
	// Recheck is how often an absent VirtualMachine CRD is looked for.
	Recheck time.Duration
	// MaxSizes is --max-size: a pod's request is held within its
	// namespace's bound as within its node's allocatable CPU.
	MaxSizes vmsize.MaxSizes
	// RetryBase and RetryMax bound the backoff of a VM whose resize PATCH
	// failed (429, 5xx, a timeout, a refusal): it is retried RetryBase
	// after the first failure, twice as long after each next one, at most
	// RetryMax apart (defaults 500 ms and 5 min), until a PATCH succeeds
	// or the VM's size changes. A PATCH that can never succeed (422
	// Invalid, 404 for a pod being removed) so costs one PATCH per pod
	// every RetryMax, and one Event per EventWindow.
	RetryBase, RetryMax time.Duration

	vms cache.GenericLister
	// pods is the runner pods' store, indexed by their VM (podsByVM):
	// a sync looks up its VM's pods alone, not every pod of the VM's
	// namespace (a scan that made the first pass after a start or a
	// failover grow as the square of one namespace's VMs).
	pods  cache.Indexer
	nodes corelisters.NodeLister
	queue workqueue.TypedRateLimitingInterface[string]
	deb   debounce
	evs   eventLimit
	// now is the clock (tests replace it).
	now func() time.Time
	// crdCheck, if set, replaces the discovery call (tests).
	crdCheck func() (bool, error)

	mu sync.Mutex
	// reported remembers what was last reported per pod UID (action and
	// target), so a pod's status updates never repeat a CPUNotSized or
	// CPUResizePending Event for the same target.
	reported map[types.UID]string
	// retrying holds the VMs waiting for a retry of a failed resize, with
	// the time of the VM change that the resize applies (zero: none), for
	// the change→patch latency of the PATCH that finally succeeds.
	retrying map[string]time.Time
}

// Run watches until ctx ends. Without the VirtualMachine CRD it idles,
// saying so, and looks again every Recheck.
func (c *Controller) Run(ctx context.Context) error {
	c.setDefaults()
	if !c.awaitCRD(ctx) {
		return nil
	}
	c.Log.Info("resize controller watching vm.neon.tech/v1 virtualmachines", "coalesce", c.Coalesce, "maxDelay", c.MaxDelay, "workers", c.Workers, "minStep", c.MinStep,
		"retryBase", c.RetryBase, "retryMax", c.RetryMax)

	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(retryLimiter(c.RetryBase, c.RetryMax),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "cgwarden-sizer"})
	defer c.queue.ShutDown()
	factories, synced, err := c.watch()
	if err != nil {
		return err
	}
	for _, f := range factories {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range c.Workers {
		wg.Go(func() { c.work(ctx) })
	}
	wg.Wait()
	return nil
}

// setDefaults fills the tunables left at zero and the controller's state.
func (c *Controller) setDefaults() {
	orDefault(&c.Coalesce, 2*time.Second)
	orDefault(&c.Recheck, time.Minute)
	orDefault(&c.MaxDelay, 5*c.Coalesce)
	orDefault(&c.Workers, 8)
	orDefault(&c.EventWindow, 10*time.Minute)
	orDefault(&c.RetryBase, 500*time.Millisecond)
	orDefault(&c.RetryMax, 5*time.Minute)
	if c.now == nil {
		c.now = time.Now
	}
	c.deb = debounce{Window: c.Coalesce, MaxDelay: c.MaxDelay}
	c.evs = eventLimit{Window: c.EventWindow}
	c.reported = map[types.UID]string{}
	c.retrying = map[string]time.Time{}
}

// orDefault sets *p to def when it is 0 or below.
func orDefault[T int | time.Duration](p *T, def T) {
	if *p <= 0 {
		*p = def
	}
}

// awaitCRD waits, idle, until the VirtualMachine CRD is installed
// (checked every Recheck); false when ctx ends first.
func (c *Controller) awaitCRD(ctx context.Context) bool {
	for said := false; ; said = true {
		ok, err := c.crdPresent()
		if err != nil {
			c.Log.Warn("cannot tell whether the VirtualMachine CRD is installed", "err", err)
		}
		if ok {
			return true
		}
		if !said {
			c.Log.Info("no vm.neon.tech/v1 virtualmachines in this cluster: resize controller idle", "recheck", c.Recheck)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(c.Recheck):
		}
	}
}

// factory is what Run needs of an informer factory, typed or dynamic.
type factory interface {
	Start(stop <-chan struct{})
	Shutdown()
}

// watch sets up the three informers (VMs, runner pods, nodes' allocatable
// CPU), their listers and their handlers, and returns their factories to
// start and what says they have synced.
func (c *Controller) watch() ([]factory, []cache.InformerSynced, error) {
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(c.Dynamic, 0)
	vmInf := dyn.ForResource(VirtualMachines)
	if err := vmInf.Informer().SetTransform(vmsize.Slim); err != nil {
		return nil, nil, fmt.Errorf("VM informer: %w", err)
	}
	c.vms = vmInf.Lister()
	if _, err := vmInf.Informer().AddEventHandler(c.vmHandler()); err != nil {
		return nil, nil, fmt.Errorf("VM informer: %w", err)
	}
	kf := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = vmsize.LabelNeonVM
	}), informers.WithTransform(slimRunnerPod))
	podInf := kf.Core().V1().Pods()
	if err := podInf.Informer().AddIndexers(cache.Indexers{podsByVM: podVMKey}); err != nil {
		return nil, nil, fmt.Errorf("pod informer: %w", err)
	}
	c.pods = podInf.Informer().GetIndexer()
	if _, err := podInf.Informer().AddEventHandler(c.podHandler()); err != nil {
		return nil, nil, fmt.Errorf("pod informer: %w", err)
	}
	// Nodes' allocatable CPU from an informer that keeps nothing else of a
	// Node (no GET per resize; a few hundred bytes per node).
	nf := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithTransform(nodeAllocatableOnly))
	nodeInf := nf.Core().V1().Nodes()
	c.nodes = nodeInf.Lister()
	return []factory{dyn, kf, nf},
		[]cache.InformerSynced{vmInf.Informer().HasSynced, podInf.Informer().HasSynced, nodeInf.Informer().HasSynced}, nil
}

// vmHandler queues a VM after the coalescing delay when it is added or
// changes; a new size starts its resize from no backoff.
func (c *Controller) vmHandler() cache.ResourceEventHandler {
	enqueue := func(obj any, resized bool) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			if resized {
				c.resetRetry(key) // a new size: a new resize, from no backoff
			}
			c.deb.changed(key, c.now())
			c.queue.AddAfter(key, c.Coalesce)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { enqueue(o, true) },
		UpdateFunc: func(old, o any) { enqueue(o, sizeChanged(old, o)) },
		DeleteFunc: func(o any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
				c.deb.forget(key)
				c.resetRetry(key)
			}
		},
	}
}

// podHandler queues a runner pod's VM when the pod is added or changes
// and forgets what was reported of a pod that went.
func (c *Controller) podHandler() cache.ResourceEventHandler {
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Labels[vmsize.LabelNeonVM] != "" {
			// A pod that starts running, or whose resize status
			// changes, is looked at again; through the same delay, so a
			// pod's status update in the middle of a burst of VM changes
			// does not apply an intermediate size.
			c.queue.AddAfter(p.Namespace+"/"+p.Labels[vmsize.LabelNeonVM], c.Coalesce)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				c.forget(p.UID)
			}
		},
	}
}

// work takes VMs off the queue until it shuts down. The queue never hands
// one key to two workers at once.
func (c *Controller) work(ctx context.Context) {
	for {
		key, quit := c.queue.Get()
		if quit {
			return
		}
		c.Metrics.depth(c.queue.Len(), c.deb.pending())
		if wait, last := c.deb.due(key, c.now()); wait > 0 {
			// Changed again inside the window: look again when it ends.
			c.queue.AddAfter(key, wait)
		} else {
			if last.IsZero() {
				last = c.retryOf(key)
			}
			c.settle(key, last, c.sync(ctx, key, last))
		}
		c.queue.Done(key)
	}
}

// settle ends one sync of key: a refused PATCH puts the VM back with
// backoff (the rate limiter's next delay for it); anything else, done or
// an error no retry would mend (a VM without a valid size), forgets its
// backoff.
func (c *Controller) settle(key string, changed time.Time, err error) {
	var refused *refusedError
	if !errors.As(err, &refused) {
		if err != nil {
			c.Log.Warn("resize", "vm", key, "err", err)
		}
		c.resetRetry(key)
		return
	}
	c.mu.Lock()
	if _, ok := c.retrying[key]; !ok || !changed.IsZero() {
		c.retrying[key] = changed
	}
	c.Metrics.retries(len(c.retrying))
	c.mu.Unlock()
	c.Metrics.resize("retried")
	c.Log.Warn("resize failed: retrying with backoff", "vm", key, "failures", c.queue.NumRequeues(key)+1, "err", err)
	c.queue.AddRateLimited(key)
}

// resetRetry forgets key's backoff: its resize succeeded, or there is a new
// one to make (the VM's size changed), or none (the VM is gone).
func (c *Controller) resetRetry(key string) {
	c.queue.Forget(key)
	c.mu.Lock()
	if _, ok := c.retrying[key]; ok {
		delete(c.retrying, key)
		c.Metrics.retries(len(c.retrying))
	}
	c.mu.Unlock()
}

// retryOf is the VM change a retry of key applies (zero: none known).
func (c *Controller) retryOf(key string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.retrying[key]
}

// retryLimiter is the queue's rate limiter for failed resizes: per VM,
// base after the first failure, doubling up to max (client-go's
// exponential failure limiter; its controllers' default is 5 ms to
// 1000 s, which starts too fast for an API server that answers 429);
// over all VMs, at most 10 retries a second after a burst of 100
// (client-go's default bucket), so that a refusal of every PATCH (an
// outage, a webhook down) does not come back as a storm.
func retryLimiter(base, max time.Duration) workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](base, max),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// sizeChanged reports whether a VM update changed what sync reads of it:
// its size, or the runner pod its status names (or whether either side
// cannot be read: then it may have). Its other updates (status, labels)
// leave a failed resize's backoff as it is.
func sizeChanged(old, cur any) bool {
	o, ok1 := old.(*unstructured.Unstructured)
	n, ok2 := cur.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return true
	}
	a, err1 := vmsize.FromObject(o.Object, vmsize.Request)
	b, err2 := vmsize.FromObject(n.Object, vmsize.Request)
	return err1 != nil || err2 != nil || !a.Equal(b)
}

// refusedError is a resize PATCH that failed: the API server refused it,
// or it did not reach it. Its VM is retried with backoff.
type refusedError struct {
	pod string
	to  int64
	err error
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("pod %s: resize to %s: %v", e.pod, vmsize.FormatMilli(e.to), e.err)
}

func (e *refusedError) Unwrap() error { return e.err }

func (c *Controller) crdPresent() (bool, error) {
	if c.crdCheck != nil {
		return c.crdCheck()
	}
	list, err := c.Client.Discovery().ServerResourcesForGroupVersion(VirtualMachines.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovery of %s: %w", VirtualMachines.GroupVersion(), err)
	}
	for _, r := range list.APIResources {
		if r.Name == VirtualMachines.Resource {
			return true, nil
		}
	}
	return false, nil
}

func (c *Controller) forget(uid types.UID) {
	c.mu.Lock()
	delete(c.reported, uid)
	c.mu.Unlock()
}

// once reports whether (uid, what) is new, remembering it.
func (c *Controller) once(uid types.UID, what string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reported[uid] == what {
		return false
	}
	c.reported[uid] = what
	return true
}

// sync brings the runner pods of one VM (key namespace/name) to its size.
// changed is when the VM last changed (zero: a pod's own update), for the
// change→patch latency.
func (c *Controller) sync(ctx context.Context, key string, changed time.Time) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	obj, err := c.vms.ByNamespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("VirtualMachine %s: %w", key, err)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("VirtualMachine %s: a %T", key, obj)
	}
	pods, err := c.podsOf(key)
	if err != nil {
		return fmt.Errorf("pods of VirtualMachine %s: %w", key, err)
	}
	if len(pods) == 0 {
		return nil
	}
	vm, err := vmsize.FromObject(u.Object, vmsize.Request)
	if err != nil {
		c.Metrics.resize("unsizable")
		return err
	}
	// Of the pods that carry the VM's label, only the one its status
	// names is its runner (the size policy: the agent weighs that one
	// alone too); the others' labels and owner references are their own.
	p := Runner(vm, pods)
	if p == nil {
		c.Log.Debug("no runner: the VM's status names none of its labelled pods", "vm", key, "podName", vm.PodName, "labelled", len(pods))
		return nil
	}
	var alloc int64
	if p.Spec.NodeName != "" {
		alloc = c.allocatable(p.Spec.NodeName)
	}
	return c.syncPod(ctx, p, vm.MilliCPU, alloc, changed)
}

// podsByVM is the pod store's index of each pod by its VM's key
// (namespace/name, the queue's key): podVMKey.
const podsByVM = "cgwarden.io/vm"

// podVMKey is the podsByVM index function: a pod's namespace and its
// vm.neon.tech/name label (none without the label).
func podVMKey(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	if vm := p.Labels[vmsize.LabelNeonVM]; vm != "" {
		return []string{p.Namespace + "/" + vm}, nil
	}
	return nil, nil
}

// podsOf is the pods labelled with VM key's name in its namespace, from
// the index: as many looked at as the VM has pods, whatever else the
// namespace holds.
func (c *Controller) podsOf(key string) ([]*corev1.Pod, error) {
	objs, err := c.pods.ByIndex(podsByVM, key)
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// allocatable is a node's allocatable CPU in milli-CPU, 0 if unknown.
func (c *Controller) allocatable(node string) int64 {
	n, err := c.nodes.Get(node)
	if err != nil {
		c.Log.Warn("node allocatable unknown: resizing unbounded", "node", node, "err", err)
		return 0
	}
	q, ok := n.Status.Allocatable[corev1.ResourceCPU]
	if !ok {
		return 0
	}
	return q.MilliValue()
}

func (c *Controller) syncPod(ctx context.Context, p *corev1.Pod, size, alloc int64, changed time.Time) error {
	bound := c.MaxSizes.For(p.Namespace)
	limit, _ := bound.Limit(alloc)
	d := WithMinStep(DecideResize(p, size, alloc, bound), c.MinStep, limit)
	log := c.Log.With("namespace", p.Namespace, "pod", p.Name)
	switch d.Action {
	case ActNone, ActSkip:
		if d.Action == ActSkip && d.Reason != "" {
			log.Debug("not resized", "reason", d.Reason)
		}
		return nil
	case ActNotSized:
		if c.once(p.UID, "not-sized") {
			c.Metrics.resize("not_sized")
			c.event(p, corev1.EventTypeWarning, ReasonNotSized, "CPU not sized: %s", d.Reason)
			log.Warn("runner pod not sized", "reason", d.Reason)
		}
		return nil
	case ActPending:
		// Keyed by target and reason (Infeasible, Deferred), not the
		// kubelet's message, which may change with every status update.
		reason, _, _ := strings.Cut(d.Reason, ":")
		if c.once(p.UID, fmt.Sprintf("pending %d %s", d.To, reason)) {
			c.Metrics.resize("pending")
			c.event(p, corev1.EventTypeWarning, ReasonPending, "CPU request %s on %s not applied by the kubelet: %s", vmsize.FormatMilli(d.To), d.On(), d.Reason)
			log.Warn("resize pending", "cpu", vmsize.FormatMilli(d.To), "reason", d.Reason)
		}
		return nil
	}
	// A PATCH that fails is made again, with backoff (settle), until one
	// succeeds or the VM's size changes; its Event goes through the
	// eventLimit like any other.
	_, err := c.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType,
		resizePatch(d), metav1.PatchOptions{FieldManager: "cgwarden-sizer"}, "resize")
	if err != nil {
		c.Metrics.resize("failed")
		c.event(p, corev1.EventTypeWarning, ReasonResizeError, "CPU request %s → %s on %s refused: %v", d.from(), vmsize.FormatMilli(d.To), d.On(), err)
		return &refusedError{pod: p.Namespace + "/" + p.Name, to: d.To, err: err}
	}
	c.forget(p.UID) // done: a later pending status is reported afresh
	c.Metrics.resize("resized")
	if !changed.IsZero() {
		c.Metrics.latency(c.now().Sub(changed))
	}
	msg := fmt.Sprintf("CPU request %s → %s on %s (VM size %s)", d.from(), vmsize.FormatMilli(d.To), d.On(), vmsize.FormatMilli(size))
	if d.Reason != "" {
		msg += ": " + d.Reason
	}
	c.event(p, corev1.EventTypeNormal, ReasonResized, "%s", msg)
	if d.Reason != "" {
		log = log.With("reason", d.Reason)
	}
	log.Info("resized", "on", d.On(), "from", d.from(), "to", vmsize.FormatMilli(d.To), "vmSize", vmsize.FormatMilli(size))
	return nil
}

// event records an Event on p, at most one per pod and reason per
// EventWindow; the rest are only counted (suppressed). What the recorder
// sends is counted as its sink writes it (Metrics.EventWritten).
func (c *Controller) event(p *corev1.Pod, typ, reason, format string, a ...any) {
	if c.Events == nil {
		return
	}
	if !c.evs.allow(string(p.UID)+"/"+reason, c.now()) {
		c.Metrics.event(reason, "suppressed")
		return
	}
	c.Events.Eventf(p, typ, reason, format, a...)
}

// Metrics counts the sizer's decisions.
type Metrics struct {
	admissions *prometheus.CounterVec
	resizes    *prometheus.CounterVec
	events     *prometheus.CounterVec
	latencies  prometheus.Histogram
	queue      prometheus.Gauge
	debouncing prometheus.Gauge
	retrying   prometheus.Gauge
}

// NewMetrics registers the sizer's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cgwarden_sizer_admissions_total",
			Help: "Pod admissions reviewed by the sizer, by result: sized, skipped (not a VM pod, KubeVirt, or requests already set), unsized (a VM pod it could not size; admitted unchanged with a warning), refused (a request no API server sends: too large, unreadable, two namespaces; or over the in-flight bound).",
		}, []string{"result"}),
		resizes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cgwarden_sizer_resizes_total",
			Help: "Resize controller outcomes, by result: resized, failed (a resize PATCH the API server refused or that did not reach it; each attempt), retried (a VM put back with backoff after a failed PATCH: it is retried until a PATCH succeeds or its size changes), pending (the kubelet reports PodResizePending Infeasible or Deferred), not_sized (a BestEffort runner pod), unsizable (a VM without a valid spec.guest.cpus.use).",
		}, []string{"result"}),
	}
	for _, r := range []string{"sized", "skipped", "unsized", "refused"} {
		m.admissions.WithLabelValues(r)
	}
	m.events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cgwarden_sizer_events_total",
		Help: "The resize controller's Events, by reason and result: sent (written to the API server: created, or aggregated into an earlier Event), failed (a write the API server refused or that did not reach it; client-go retries the latter, so one Event may count more than once), suppressed (over one per pod and reason per --event-window, never recorded). An Event client-go's own spam filter drops is in none.",
	}, []string{"reason", "result"})
	m.latencies = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cgwarden_sizer_resize_latency_seconds",
		Help:    "From a VirtualMachine's last size change to the resize PATCH of its runner pod (includes the --coalesce debounce).",
		Buckets: []float64{0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30, 60, 120, 300},
	})
	m.queue = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cgwarden_sizer_queue_depth",
		Help: "VirtualMachines waiting in the resize controller's queue, as a worker last saw it.",
	})
	m.debouncing = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cgwarden_sizer_debouncing_vms",
		Help: "VirtualMachines whose size changed and whose resize waits for the --coalesce window to end.",
	})
	m.retrying = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cgwarden_sizer_retrying_vms",
		Help: "VirtualMachines whose resize PATCH failed and that wait, with backoff, for a retry: mis-sized until one succeeds or their size changes.",
	})
	for _, r := range []string{"resized", "failed", "retried", "pending", "not_sized", "unsizable"} {
		m.resizes.WithLabelValues(r)
	}
	reg.MustRegister(m.admissions, m.resizes, m.events, m.latencies, m.queue, m.debouncing, m.retrying)
	return m
}

func (m *Metrics) event(reason, result string) {
	if m != nil {
		m.events.WithLabelValues(reason, result).Inc()
	}
}

// EventWritten counts one write of an Event by the recorder's sink
// (apiconn.EventRecorder's count): sent, or failed with err.
func (m *Metrics) EventWritten(reason string, err error) {
	if err != nil {
		m.event(reason, "failed")
		return
	}
	m.event(reason, "sent")
}

func (m *Metrics) latency(d time.Duration) {
	if m != nil {
		m.latencies.Observe(d.Seconds())
	}
}

func (m *Metrics) depth(queued, debouncing int) {
	if m != nil {
		m.queue.Set(float64(queued))
		m.debouncing.Set(float64(debouncing))
	}
}

func (m *Metrics) retries(n int) {
	if m != nil {
		m.retrying.Set(float64(n))
	}
}

// Admission counts one admission result.
func (m *Metrics) Admission(result string) {
	if m != nil {
		m.admissions.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) resize(result string) {
	if m != nil {
		m.resizes.WithLabelValues(result).Inc()
	}
}
