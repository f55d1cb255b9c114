package podsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// KubeSource lists this node's pods from an informer's cache: one watch
// on the API server, however often the agent scans.
type KubeSource struct {
	lister listersv1.PodLister
	synced cache.InformerSynced
}

var _ Lister = (*KubeSource)(nil)

// OpenKubernetes builds a client (kubeconfig, else in-cluster) and starts
// the informer; it waits for the first list up to cfg.SyncTimeout.
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
	rc.UserAgent = "cgwarden"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	timeout := cfg.SyncTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	return NewKubernetes(ctx, cs, cfg.NodeName, timeout)
}

// NewKubernetes starts an informer on client for the pods of node, which
// runs until ctx is done, and waits up to timeout for its first list.
func NewKubernetes(ctx context.Context, client kubernetes.Interface, node string, timeout time.Duration) (*KubeSource, error) {
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }))
	pods := factory.Core().V1().Pods()
	k := &KubeSource{lister: pods.Lister(), synced: pods.Informer().HasSynced}
	factory.Start(ctx.Done())
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), k.synced) {
		return nil, fmt.Errorf("pods of node %s not listed from the API server within %s", node, timeout)
	}
	return k, nil
}

// Pods implements Lister.
func (k *KubeSource) Pods(context.Context) ([]metadata.Pod, error) {
	if !k.synced() {
		return nil, errors.New("kubernetes pod informer not synced")
	}
	items, err := k.lister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make([]metadata.Pod, 0, len(items))
	for _, p := range items {
		out = append(out, metadata.FromAPI(p))
	}
	return out, nil
}
