package vmsize

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// objectFields are the paths of a VM object that FromObject reads, in
// either mode, and that a store needs (name, namespace, uid,
// resourceVersion).
var objectFields = [][]string{
	{"apiVersion"}, {"kind"},
	{"metadata", "name"}, {"metadata", "namespace"}, {"metadata", "uid"}, {"metadata", "resourceVersion"},
	{"spec", "guest", "cpus"}, {"status", "podName"}, // NeonVM
	{"spec", "domain", "cpu"}, {"status", "activePods"}, // KubeVirt
}

// Slim is the VM informers' transform (a client-go cache.TransformFunc),
// the agent's and the sizer's alike: it keeps of a VM object the fields
// FromObject reads, so an informer holds a few hundred bytes per VM, not
// its whole spec and status (a NeonVM VirtualMachine is about 2 KiB). A
// path whose parent is not a map is left out, not made up. The kept values
// are shared with the object, which the informer drops (no copy, so no
// value of an odd type can make a deep copy panic). Slim is idempotent,
// and returns anything that is not an *unstructured.Unstructured (a
// cache.DeletedFinalStateUnknown tombstone, whose object the store already
// slimmed) unchanged.
func Slim(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := map[string]any{}
	for _, path := range objectFields {
		val, found, err := unstructured.NestedFieldNoCopy(u.Object, path...)
		if err != nil || !found {
			continue
		}
		m := out
		for _, k := range path[:len(path)-1] {
			next, ok := m[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[k] = next
			}
			m = next
		}
		m[path[len(path)-1]] = val
	}
	return &unstructured.Unstructured{Object: out}, nil
}
