package sizer

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cgwarden/cgwarden/internal/vmsize"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
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
	// every change). A pod below its node's cap is still raised to it.
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

	vms   cache.GenericLister
	pods  corelisters.PodLister
	nodes corelisters.NodeLister
	queue workqueue.TypedDelayingInterface[string]
	deb   debounce
	evs   eventLimit
	// now is the clock (tests replace it).
	now func() time.Time
	// crdCheck, if set, replaces the discovery call (tests).
	crdCheck func() (bool, error)

	mu sync.Mutex
	// reported remembers what was last reported or attempted per pod UID
	// (action and target), so a pod's status updates never repeat an
	// Event or a failed patch for the same target.
	reported map[types.UID]string
}

// Run watches until ctx ends. Without the VirtualMachine CRD it idles,
// saying so, and looks again every Recheck.
func (c *Controller) Run(ctx context.Context) error {
	if c.Coalesce <= 0 {
		c.Coalesce = 2 * time.Second
	}
	if c.Recheck <= 0 {
		c.Recheck = time.Minute
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = 5 * c.Coalesce
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.EventWindow <= 0 {
		c.EventWindow = 10 * time.Minute
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.deb = debounce{Window: c.Coalesce, MaxDelay: c.MaxDelay}
	c.evs = eventLimit{Window: c.EventWindow}
	c.reported = map[types.UID]string{}
	log := c.Log
	for said := false; ; said = true {
		ok, err := c.crdPresent()
		if err != nil {
			log.Warn("cannot tell whether the VirtualMachine CRD is installed", "err", err)
		}
		if ok {
			break
		}
		if !said {
			log.Info("no vm.neon.tech/v1 virtualmachines in this cluster: resize controller idle", "recheck", c.Recheck)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.Recheck):
		}
	}
	log.Info("resize controller watching vm.neon.tech/v1 virtualmachines", "coalesce", c.Coalesce, "maxDelay", c.MaxDelay, "workers", c.Workers, "minStep", c.MinStep)

	c.queue = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "cgwarden-sizer"})
	defer c.queue.ShutDown()
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(c.Dynamic, 0)
	vmInf := dyn.ForResource(VirtualMachines)
	c.vms = vmInf.Lister()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.deb.changed(key, c.now())
			c.queue.AddAfter(key, c.Coalesce)
		}
	}
	if _, err := vmInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) },
		DeleteFunc: func(o any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
				c.deb.forget(key)
			}
		},
	}); err != nil {
		return fmt.Errorf("VM informer: %w", err)
	}
	kf := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = vmsize.LabelNeonVM
	}))
	podInf := kf.Core().V1().Pods()
	c.pods = podInf.Lister()
	// Nodes' allocatable CPU from an informer that keeps nothing else of a
	// Node (no GET per resize; a few hundred bytes per node).
	nf := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithTransform(nodeAllocatableOnly))
	nodeInf := nf.Core().V1().Nodes()
	c.nodes = nodeInf.Lister()
	podEnqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Labels[vmsize.LabelNeonVM] != "" {
			// A pod that starts running, or whose resize status
			// changes, is looked at again; through the same delay, so a
			// pod's status update in the middle of a burst of VM changes
			// does not apply an intermediate size.
			c.queue.AddAfter(p.Namespace+"/"+p.Labels[vmsize.LabelNeonVM], c.Coalesce)
		}
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: podEnqueue, UpdateFunc: func(_, o any) { podEnqueue(o) },
		DeleteFunc: func(o any) {
			if p, ok := o.(*corev1.Pod); ok {
				c.forget(p.UID)
			}
		},
	}); err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	dyn.Start(ctx.Done())
	kf.Start(ctx.Done())
	nf.Start(ctx.Done())
	defer dyn.Shutdown()
	defer kf.Shutdown()
	defer nf.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), vmInf.Informer().HasSynced, podInf.Informer().HasSynced, nodeInf.Informer().HasSynced) {
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
		} else if err := c.sync(ctx, key, last); err != nil {
			c.Log.Warn("resize", "vm", key, "err", err)
		}
		c.queue.Done(key)
	}
}

// nodeAllocatableOnly is the node informer's transform: a Node's name and
// allocatable CPU, nothing else.
func nodeAllocatableOnly(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown tombstone
	}
	slim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion, UID: n.UID}}
	if q, ok := n.Status.Allocatable[corev1.ResourceCPU]; ok {
		slim.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: q}
	}
	return slim, nil
}

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
	pods, err := c.pods.Pods(ns).List(labels.SelectorFromSet(labels.Set{vmsize.LabelNeonVM: name}))
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
	d := WithMinStep(DecideResize(p, size, alloc), c.MinStep, alloc)
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
			c.event(p, corev1.EventTypeWarning, ReasonPending, "CPU request %s on %s not applied by the kubelet: %s", FormatMilli(d.To), d.Container, d.Reason)
			log.Warn("resize pending", "cpu", FormatMilli(d.To), "reason", d.Reason)
		}
		return nil
	}
	attempt := fmt.Sprintf("resize %d", d.To)
	if !c.once(p.UID, attempt) {
		// This very resize failed before; the pod changed since, but not
		// its request: wait for the next VM change rather than loop.
		return nil
	}
	_, err := c.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType,
		resizePatch(d.Container, d.To), metav1.PatchOptions{FieldManager: "cgwarden-sizer"}, "resize")
	if err != nil {
		c.Metrics.resize("failed")
		c.event(p, corev1.EventTypeWarning, ReasonResizeError, "CPU request %s → %s on %s refused: %v", FormatMilli(d.From), FormatMilli(d.To), d.Container, err)
		return fmt.Errorf("pod %s/%s: resize to %s: %w", p.Namespace, p.Name, FormatMilli(d.To), err)
	}
	c.forget(p.UID) // done: a later pending status is reported afresh
	c.Metrics.resize("resized")
	if !changed.IsZero() {
		c.Metrics.latency(c.now().Sub(changed))
	}
	msg := fmt.Sprintf("CPU request %s → %s on %s (VM size %s)", FormatMilli(d.From), FormatMilli(d.To), d.Container, FormatMilli(size))
	if d.Reason != "" {
		msg += ": " + d.Reason
	}
	c.event(p, corev1.EventTypeNormal, ReasonResized, "%s", msg)
	log.Info("resized", "container", d.Container, "from", FormatMilli(d.From), "to", FormatMilli(d.To), "vmSize", FormatMilli(size))
	return nil
}

// event records an Event on p, at most one per pod and reason per
// EventWindow; the rest are only counted.
func (c *Controller) event(p *corev1.Pod, typ, reason, format string, a ...any) {
	if c.Events == nil {
		return
	}
	if !c.evs.allow(string(p.UID)+"/"+reason, c.now()) {
		c.Metrics.event(reason, "suppressed")
		return
	}
	c.Metrics.event(reason, "sent")
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
}

// NewMetrics registers the sizer's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cgwarden_sizer_admissions_total",
			Help: "Pod admissions reviewed by the sizer, by result: sized, skipped (not a VM pod, KubeVirt, or requests already set), unsized (a VM pod it could not size; admitted unchanged with a warning).",
		}, []string{"result"}),
		resizes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cgwarden_sizer_resizes_total",
			Help: "Resize controller outcomes, by result: resized, failed (the API server refused), pending (the kubelet reports PodResizePending Infeasible or Deferred), not_sized (a BestEffort runner pod), unsizable (a VM without a valid spec.guest.cpus.use).",
		}, []string{"result"}),
	}
	for _, r := range []string{"sized", "skipped", "unsized"} {
		m.admissions.WithLabelValues(r)
	}
	m.events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cgwarden_sizer_events_total",
		Help: "Events the resize controller meant to record, by reason and result: sent, or suppressed (one per pod and reason per --event-window).",
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
	for _, r := range []string{"resized", "failed", "pending", "not_sized", "unsizable"} {
		m.resizes.WithLabelValues(r)
	}
	reg.MustRegister(m.admissions, m.resizes, m.events, m.latencies, m.queue, m.debouncing)
	return m
}

func (m *Metrics) event(reason, result string) {
	if m != nil {
		m.events.WithLabelValues(reason, result).Inc()
	}
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
