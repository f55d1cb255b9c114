package podsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/cgwarden/cgwarden/internal/apiconn"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// PodWatcher lists and watches pods. A client-go PodInterface satisfies
// it; cgwarden's own is a REST client that knows only core/v1, because the
// typed clientset and informer factory register every API group and would
// double the binary's memory for the one resource read here.
type PodWatcher interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// KubeSource lists this node's pods from an informer: one watch on the
// API server, however often the agent scans. The informer keeps slim pods
// (SlimPod); its events update a map of converted pods, and Pods returns
// the same slice until an event changed one (so a caller can tell "no
// change" by the slice alone, as hold.MetaSource does).
type KubeSource struct {
	synced cache.InformerSynced
	stop   context.CancelFunc

	mu    sync.Mutex
	byUID map[types.UID]metadata.Pod
	// list is what Pods returns, rebuilt from byUID when dirty.
	list  []metadata.Pod
	dirty bool
	// changes is notified whenever the list changes (dirty set).
	changes *metadata.Changes
}

// ErrNotSynced is returned with a source whose first list did not complete
// in time; the source keeps trying and answers once it has.
var ErrNotSynced = errors.New("kubernetes pod informer not synced")

// Close stops the informer.
func (k *KubeSource) Close() { k.stop() }

var _ metadata.Lister = (*KubeSource)(nil)

// OpenKubernetes builds a client (kubeconfig, else in-cluster) and starts
// the informer; it waits for the first list up to cfg.SyncTimeout. See
// NewKubernetes for what a timeout returns.
func OpenKubernetes(ctx context.Context, cfg Config, log *slog.Logger) (*KubeSource, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("the Kubernetes source needs the node's name (--node-name or NODE_NAME)")
	}
	rc, err := apiconn.RESTConfig(cfg.Kubeconfig, cfg.WrapTransport)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	timeout := cfg.SyncTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	pods, err := podReader(rc, cfg.NodeName, log)
	if err != nil {
		return nil, err
	}
	return NewKubernetes(ctx, pods, cfg.NodeName, timeout, cfg.AllLabels)
}

// AsNode is cfg acting as the node's own identity, system:node:<node>:
// the API server's Node authorizer then lets it read the pods bound to
// the node, with the field selector spec.nodeName=<node>, and nothing
// else of the cluster's pods, as it lets the kubelet. The agent's
// ServiceAccount may impersonate its node only from a token bound to a
// pod on that node (constrained impersonation, KEP-5284: beta and on by
// default from Kubernetes 1.36; the verbs impersonate:associated-node on
// nodes and impersonate-on:associated-node:list and :watch on pods,
// deploy/kustomize/components/node-scoped).
func AsNode(cfg *rest.Config, node string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + node}
	return c
}

// podReader is the client the node's pods are read with: as the node
// (AsNode) when the API server allows it, else as the agent's own
// identity, which then needs list and watch on pods cluster-wide (RBAC
// cannot narrow them to a node). No request is made to find out: the
// informer's own requests decide (apiconn.Preferred), and each change is
// logged.
func podReader(rc *rest.Config, node string, log *slog.Logger) (PodWatcher, error) {
	own, err := NewPodClient(rc)
	if err != nil {
		return nil, err
	}
	asNode, err := NewPodClient(AsNode(rc, node))
	if err != nil {
		return nil, err
	}
	r := &nodeFirst{ids: [2]PodWatcher{asNode, own}}
	r.pref.Answered = func(i int, refused error) {
		if i == 0 {
			log.Info("reading the node's pods as the node (system:node:" + node + "): the API server limits them to its own")
			return
		}
		log.Info("reading the node's pods as the agent's own identity, which may list the cluster's pods: acting as the node was refused", "err", refused)
	}
	return r, nil
}

// nodeFirst reads pods as the node (ids[0]) or as the agent (ids[1]),
// whichever pref says.
type nodeFirst struct {
	ids  [2]PodWatcher
	pref apiconn.Preferred
}

func (n *nodeFirst) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	return apiconn.Either(&n.pref, n.ids, func(p PodWatcher) (*corev1.PodList, error) { return p.List(ctx, opts) })
}

func (n *nodeFirst) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return apiconn.Either(&n.pref, n.ids, func(p PodWatcher) (watch.Interface, error) { return p.Watch(ctx, opts) })
}

// NewKubernetes starts an informer on the pods of node (field selector
// spec.nodeName), which runs until ctx is done or Close, and waits up to
// timeout for its first list. On timeout it returns the source together
// with an error wrapping ErrNotSynced: the caller may keep it (it answers
// once the API server does) or Close it.
func NewKubernetes(ctx context.Context, pods PodWatcher, node string, timeout time.Duration, allLabels bool) (*KubeSource, error) {
	// Plain list then watch, not a streaming list (WatchList): one node's
	// pods are a small list (apiconn.FieldListWatch).
	lw := apiconn.FieldListWatch(fields.OneTermEqualSelector("spec.nodeName", node), pods.List, pods.Watch)
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	transform := SlimPod
	if allLabels {
		transform = slimPodAllLabels
	}
	if err := inf.SetTransform(transform); err != nil {
		return nil, err
	}
	k := &KubeSource{byUID: map[types.UID]metadata.Pod{}, list: []metadata.Pod{}, changes: metadata.NewChanges()}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    k.set,
		UpdateFunc: func(_, obj any) { k.set(obj) },
		DeleteFunc: k.unset,
	})
	if err != nil {
		return nil, err
	}
	ictx, stop := context.WithCancel(ctx)
	go inf.Run(ictx.Done())
	// Synced once the first list has reached the handler, not only the
	// store: Pods reads what the handler wrote.
	k.synced, k.stop = reg.HasSynced, stop
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), k.synced) {
		return k, fmt.Errorf("pods of node %s not listed from the API server within %s: %w", node, timeout, ErrNotSynced)
	}
	return k, nil
}

// set records an added or updated pod; a pod whose metadata did not
// change (a status condition, a resourceVersion) leaves the list as it is.
func (k *KubeSource) set(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	m := metadata.FromAPI(p)
	k.mu.Lock()
	defer k.mu.Unlock()
	if old, ok := k.byUID[p.UID]; ok && reflect.DeepEqual(old, m) {
		return
	}
	k.byUID[p.UID], k.dirty = m, true
	k.changes.Notify()
}

// Changes is notified whenever a pod's metadata changes, is added or goes
// away: Pods then answers differently.
func (k *KubeSource) Changes() *metadata.Changes { return k.changes }

func (k *KubeSource) unset(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.byUID[p.UID]; ok {
		delete(k.byUID, p.UID)
		k.dirty = true
		k.changes.Notify()
	}
}

// Pods implements metadata.Lister. The slice is shared: callers must not change
// it. It is the same slice until a pod's metadata changes.
func (k *KubeSource) Pods(context.Context) ([]metadata.Pod, error) {
	if !k.synced() {
		return nil, ErrNotSynced
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dirty {
		list := make([]metadata.Pod, 0, len(k.byUID))
		for _, p := range k.byUID {
			list = append(list, p)
		}
		slices.SortFunc(list, func(a, b metadata.Pod) int { return strings.Compare(a.UID, b.UID) })
		k.list, k.dirty = list, false
	}
	return k.list, nil
}

// podClient lists and watches pods in all namespaces over REST, with a
// scheme that holds core/v1 only.
type podClient struct{ c *rest.RESTClient }

var _ PodWatcher = (*podClient)(nil)

// NewPodClient returns a pods-only client for cfg.
func NewPodClient(cfg *rest.Config) (PodWatcher, error) {
	c := rest.CopyConfig(cfg)
	c.UserAgent = "cgwarden"
	rc, err := apiconn.Client(c, corev1.SchemeGroupVersion, corev1.AddToScheme)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &podClient{rc}, nil
}

func (p *podClient) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	err := p.c.Get().Resource("pods").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

func (p *podClient) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return p.c.Get().Resource("pods").VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}
