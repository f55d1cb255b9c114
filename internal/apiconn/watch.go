package apiconn

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// FieldListWatch is an informer's list and watch, made by listFn and watchFn
// with the field selector selector. It is a plain list then watch, never
// a streaming list (WatchList), whose list would not go through listFn (and
// so not through what a caller's listFn adds: a backoff, a note of a
// refusal); every API server (and client-go's fakes) serves list+watch,
// whatever its feature gates.
func FieldListWatch[L runtime.Object](selector fields.Selector, listFn func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	s := selector.String()
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = s
			return listFn(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = s
			return watchFn(ctx, o)
		},
	}, listThenWatch{})
}

// listThenWatch tells the reflector not to use streaming lists.
type listThenWatch struct{}

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// WatchOne is an informer on the one object named name (of the resource,
// and in the namespace, that listFn and watchFn ask): a list and watch with
// the field selector metadata.name=<name> (FieldListWatch), no resync,
// the object passed through transform (nil: none) before it is stored.
// set receives the object as each add or update delivers it; unset is
// called when it is deleted. It runs with the controller's RunWithContext.
func WatchOne[L runtime.Object](name string, listFn func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
	transform cache.TransformFunc, set func(*unstructured.Unstructured), unset func()) cache.Controller {
	setIfNamed := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok && u.GetName() == name {
			set(u)
		}
	}
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: FieldListWatch(fields.OneTermEqualSelector("metadata.name", name), listFn, watchFn),
		ObjectType:    &unstructured.Unstructured{},
		Transform:     transform,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    setIfNamed,
			UpdateFunc: func(_, obj any) { setIfNamed(obj) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				if u, ok := obj.(*unstructured.Unstructured); !ok || u.GetName() == name {
					unset()
				}
			},
		},
	})
	return ctrl
}
