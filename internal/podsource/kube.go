package podsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

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

// KubeSource lists this node's pods from an informer's cache: one watch
// on the API server, however often the agent scans.
type KubeSource struct {
	store  cache.Store
	synced cache.InformerSynced
	stop   context.CancelFunc
}

// ErrNotSynced is returned with a source whose first list did not complete
// in time; the source keeps trying and answers once it has.
var ErrNotSynced = errors.New("kubernetes pod informer not synced")

// Close stops the informer.
func (k *KubeSource) Close() { k.stop() }

var _ Lister = (*KubeSource)(nil)

// OpenKubernetes builds a client (kubeconfig, else in-cluster) and starts
// the informer; it waits for the first list up to cfg.SyncTimeout. See
// NewKubernetes for what a timeout returns.
func OpenKubernetes(ctx context.Context, cfg Config, log *slog.Logger) (*KubeSource, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("the Kubernetes source needs the node's name (--node-name or NODE_NAME)")
	}
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	if cfg.WrapTransport != nil {
		rc.Wrap(cfg.WrapTransport)
	}
	pods, err := NewPodClient(rc)
	if err != nil {
		return nil, err
	}
	timeout := cfg.SyncTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	return NewKubernetes(ctx, pods, cfg.NodeName, timeout)
}

// NewKubernetes starts an informer on the pods of node (field selector
// spec.nodeName), which runs until ctx is done or Close, and waits up to
// timeout for its first list. On timeout it returns the source together
// with an error wrapping ErrNotSynced: the caller may keep it (it answers
// once the API server does) or Close it.
func NewKubernetes(ctx context.Context, pods PodWatcher, node string, timeout time.Duration) (*KubeSource, error) {
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return pods.Watch(ctx, o)
		},
	}
	// Plain list then watch, not a streaming list (WatchList): one node's
	// pods are a small list, and every API server (and client-go's fake)
	// serves list+watch, whatever its feature gates.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, listThenWatch{}), &corev1.Pod{}, 0, cache.Indexers{})
	ictx, stop := context.WithCancel(ctx)
	go inf.Run(ictx.Done())
	k := &KubeSource{store: inf.GetStore(), synced: inf.HasSynced, stop: stop}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), k.synced) {
		return k, fmt.Errorf("pods of node %s not listed from the API server within %s: %w", node, timeout, ErrNotSynced)
	}
	return k, nil
}

// listThenWatch tells the reflector not to use streaming lists.
type listThenWatch struct{}

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// Pods implements Lister.
func (k *KubeSource) Pods(context.Context) ([]metadata.Pod, error) {
	if !k.synced() {
		return nil, ErrNotSynced
	}
	items := k.store.List()
	out := make([]metadata.Pod, 0, len(items))
	for _, obj := range items {
		if p, ok := obj.(*corev1.Pod); ok {
			out = append(out, metadata.FromAPI(p))
		}
	}
	return out, nil
}

// podClient lists and watches pods in all namespaces over REST, with a
// scheme that holds core/v1 only.
type podClient struct{ c *rest.RESTClient }

var _ PodWatcher = (*podClient)(nil)

// NewPodClient returns a pods-only client for cfg.
func NewPodClient(cfg *rest.Config) (PodWatcher, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	c.APIPath = "/api"
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c.UserAgent = "cgwarden"
	rc, err := rest.RESTClientFor(c)
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
