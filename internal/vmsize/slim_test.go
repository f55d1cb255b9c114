package vmsize

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestSlimReadsTheSame: a VM object cut down by Slim reads as the
// same VM as the whole one, in both modes (NeonVM with its status, KubeVirt
// with numbers as the JSON decoders give them, int64 and float64), and
// holds none of the rest.
func TestSlimReadsTheSame(t *testing.T) {
	neon := neon(map[string]any{"min": int64(1), "max": int64(8), "use": "1500m"}, nil)
	neon["metadata"].(map[string]any)["annotations"] = map[string]any{"kubectl.kubernetes.io/last-applied-configuration": "{...}"}
	neon["spec"].(map[string]any)["guest"].(map[string]any)["memorySlots"] = map[string]any{"min": 1, "max": 8, "use": 2}
	neon["status"] = map[string]any{"podName": "db-runner-x", "phase": "Running", "cpus": "1500m", "conditions": []any{map[string]any{"type": "Available"}}}
	kubevirt := map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": "fedora", "namespace": "vms", "uid": "u-f", "labels": map[string]any{"kubevirt.io/nodeName": "node-a"}},
		"spec": map[string]any{"domain": map[string]any{"cpu": map[string]any{"sockets": int64(2), "cores": int64(2), "threads": float64(1), "model": "host-passthrough"},
			"devices": map[string]any{"disks": []any{map[string]any{"name": "root"}}}}},
		"status": map[string]any{"nodeName": "node-a", "phase": "Running", "activePods": map[string]any{"pod-uid-f": "node-a"}},
	}
	for _, obj := range []map[string]any{neon, kubevirt} {
		for _, mode := range []Mode{Live, Request} {
			whole, err := FromObject(obj, mode)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Slim(&unstructured.Unstructured{Object: obj})
			if err != nil {
				t.Fatal(err)
			}
			u := s.(*unstructured.Unstructured)
			got, err := FromObject(u.Object, mode)
			if err != nil || !got.Equal(whole) {
				t.Errorf("slim %s reads %+v %v, whole %+v", whole.Name, got, err, whole)
			}
			if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "phase"); found {
				t.Errorf("slim %s kept status.phase: %v", whole.Name, u.Object)
			}
			if u.GetLabels() != nil || u.GetAnnotations() != nil {
				t.Errorf("slim %s kept labels or annotations: %v", whole.Name, u.Object)
			}
		}
	}
}
