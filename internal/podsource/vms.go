package podsource

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// The VM objects whose sizes cgwarden reads: NeonVM VirtualMachines (their
// spec.guest.cpus.use moves under NeonVM's autoscaler) and KubeVirt
// VirtualMachineInstances.
var vmResources = []schema.GroupVersionResource{
	{Group: "vm.neon.tech", Version: "v1", Resource: "virtualmachines"},
	{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"},
}

// VMSource keeps the cluster's VM objects in informer caches, for the kinds
// whose CRDs exist; a kind whose CRD appears later is picked up by Refresh.
type VMSource struct {
	dyn     dynamic.Interface
	disc    discovery.DiscoveryInterface
	log     *slog.Logger
	watched map[schema.GroupVersionResource]cache.SharedIndexInformer
	ctx     context.Context
}

// OpenVMs starts informers on the VM kinds the API server serves (none is
// not an error: VMs then come only from files and pod annotations).
func OpenVMs(ctx context.Context, rc *rest.Config, log *slog.Logger) (*VMSource, error) {
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	// Discovery runs again while serving: it must not hang on an API
	// server that went away.
	dc := rest.CopyConfig(rc)
	dc.Timeout = 10 * time.Second
	disc, err := discovery.NewDiscoveryClientForConfig(dc)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	v := &VMSource{dyn: dyn, disc: disc, log: log.With("component", "vms"), watched: map[schema.GroupVersionResource]cache.SharedIndexInformer{}, ctx: ctx}
	v.Refresh()
	return v, nil
}

// Refresh starts an informer for each VM kind whose CRD has appeared.
func (v *VMSource) Refresh() {
	for _, gvr := range vmResources {
		if _, ok := v.watched[gvr]; ok {
			continue
		}
		list, err := v.disc.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
		if err != nil || !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == gvr.Resource }) {
			continue // the CRD is not there (yet)
		}
		inf := dynamicinformer.NewFilteredDynamicInformer(v.dyn, gvr, "", 10*time.Minute, cache.Indexers{}, nil).Informer()
		go inf.Run(v.ctx.Done())
		sctx, cancel := context.WithTimeout(v.ctx, 30*time.Second)
		cache.WaitForCacheSync(sctx.Done(), inf.HasSynced)
		cancel()
		v.watched[gvr] = inf
		v.log.Info("watching VM objects", "resource", gvr.Resource, "group", gvr.Group)
	}
}

// VMs lists the VM objects the informers hold; objects whose size cannot
// be read are left out (with their reason at debug level).
func (v *VMSource) VMs() []metadata.VM {
	var out []metadata.VM
	for gvr, inf := range v.watched {
		for _, o := range inf.GetStore().List() {
			u, ok := o.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			vm, err := metadata.VMFromObject(u.Object)
			if err != nil {
				v.log.Debug("VM object without a usable size", "resource", gvr.Resource, "object", fmt.Sprintf("%s/%s", u.GetNamespace(), u.GetName()), "err", err)
				continue
			}
			out = append(out, vm)
		}
	}
	slices.SortFunc(out, func(a, b metadata.VM) int {
		return strings.Compare(a.Namespace+"/"+a.Name+"/"+a.Kind, b.Namespace+"/"+b.Name+"/"+b.Kind)
	})
	return out
}
