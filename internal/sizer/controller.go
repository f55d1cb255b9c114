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

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// VirtualMachines is NeonVM's VirtualMachine resource.
var VirtualMachines = schema.GroupVersionResource{Group: NeonVMGroup, Version: "v1", Resource: "virtualmachines"}

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
	// Coalesce is how long a change waits for the next: NeonVM's
	// autoscaler moves use often, and only the last value is applied.
	Coalesce time.Duration
	// Recheck is how often an absent VirtualMachine CRD is looked for.
	Recheck time.Duration

	vms   cache.GenericLister
	pods  corelisters.PodLister
	queue workqueue.TypedDelayingInterface[string]
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
	log.Info("resize controller watching vm.neon.tech/v1 virtualmachines", "coalesce", c.Coalesce)

	c.queue = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "cgwarden-sizer"})
	defer c.queue.ShutDown()
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(c.Dynamic, 0)
	vmInf := dyn.ForResource(VirtualMachines)
	c.vms = vmInf.Lister()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.AddAfter(key, c.Coalesce)
		}
	}
	if _, err := vmInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) },
	}); err != nil {
		return fmt.Errorf("VM informer: %w", err)
	}
	kf := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = metadata.LabelNeonVM
	}))
	podInf := kf.Core().V1().Pods()
	c.pods = podInf.Lister()
	podEnqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Labels[metadata.LabelNeonVM] != "" {
			// A pod that starts running, or whose resize status
			// changes, is looked at again; through the same delay, so a
			// pod's status update in the middle of a burst of VM changes
			// does not apply an intermediate size.
			c.queue.AddAfter(p.Namespace+"/"+p.Labels[metadata.LabelNeonVM], c.Coalesce)
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
	defer dyn.Shutdown()
	defer kf.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), vmInf.Informer().HasSynced, podInf.Informer().HasSynced) {
		return ctx.Err()
	}
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for {
		key, quit := c.queue.Get()
		if quit {
			return nil
		}
		if err := c.sync(ctx, key); err != nil {
			log.Warn("resize", "vm", key, "err", err)
		}
		c.queue.Done(key)
	}
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
func (c *Controller) sync(ctx context.Context, key string) error {
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
	pods, err := c.pods.Pods(ns).List(labels.SelectorFromSet(labels.Set{metadata.LabelNeonVM: name}))
	if err != nil {
		return fmt.Errorf("pods of VirtualMachine %s: %w", key, err)
	}
	if len(pods) == 0 {
		return nil
	}
	size, err := VMSize(u)
	if err != nil {
		c.Metrics.resize("unsizable")
		return err
	}
	var errs []error
	alloc := map[string]int64{}
	for _, p := range pods {
		a, ok := alloc[p.Spec.NodeName]
		if !ok && p.Spec.NodeName != "" {
			a = c.allocatable(ctx, p.Spec.NodeName)
			alloc[p.Spec.NodeName] = a
		}
		if err := c.syncPod(ctx, p, size, a); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// allocatable is a node's allocatable CPU in milli-CPU, 0 if unknown.
func (c *Controller) allocatable(ctx context.Context, node string) int64 {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
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

func (c *Controller) syncPod(ctx context.Context, p *corev1.Pod, size, alloc int64) error {
	d := DecideResize(p, size, alloc)
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
	msg := fmt.Sprintf("CPU request %s → %s on %s (VM size %s)", FormatMilli(d.From), FormatMilli(d.To), d.Container, FormatMilli(size))
	if d.Reason != "" {
		msg += ": " + d.Reason
	}
	c.event(p, corev1.EventTypeNormal, ReasonResized, "%s", msg)
	log.Info("resized", "container", d.Container, "from", FormatMilli(d.From), "to", FormatMilli(d.To), "vmSize", FormatMilli(size))
	return nil
}

func (c *Controller) event(p *corev1.Pod, typ, reason, format string, a ...any) {
	if c.Events != nil {
		c.Events.Eventf(p, typ, reason, format, a...)
	}
}

// Metrics counts the sizer's decisions.
type Metrics struct {
	admissions *prometheus.CounterVec
	resizes    *prometheus.CounterVec
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
	for _, r := range []string{"resized", "failed", "pending", "not_sized", "unsizable"} {
		m.resizes.WithLabelValues(r)
	}
	reg.MustRegister(m.admissions, m.resizes)
	return m
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
