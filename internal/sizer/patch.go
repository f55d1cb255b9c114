package sizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cgwarden/cgwarden/internal/vmsize"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// PatchOp is one RFC 6902 JSON patch operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Sized is the cgwarden.io/sized annotation's value: what was set, from
// what.
func Sized(t Target, milli int64) string {
	from := "annotation " + vmsize.AnnotationCPU
	if t.Source == SourceNeonVM {
		from = "VirtualMachine " + t.VMName + " spec.guest.cpus.use"
	}
	if t.PodLevel {
		return fmt.Sprintf("requests.cpu=%s on the pod (spec.resources) from %s", vmsize.FormatMilli(milli), from)
	}
	return fmt.Sprintf("requests.cpu=%s on container %s from %s", vmsize.FormatMilli(milli), t.ContainerName, from)
}

// Patch is the JSON patch that sets the target container's requests.cpu
// (with t.PodLevel, the pod's spec.resources.requests.cpu) to milli and
// records it in the cgwarden.io/sized annotation. It replaces the whole
// resources object (an "add" to an existing member replaces it), so it
// applies whether or not the incoming JSON spelled resources or requests
// out; limits and other resources are kept as they were.
func Patch(pod *corev1.Pod, t Target, milli int64) ([]PatchOp, error) {
	var res corev1.ResourceRequirements
	var path string
	switch {
	case t.PodLevel:
		if pod.Spec.Resources != nil {
			res = *pod.Spec.Resources.DeepCopy()
		}
		path = "/spec/resources"
	case t.Container < 0 || t.Container >= len(pod.Spec.Containers):
		return nil, fmt.Errorf("container %d: the pod has %d", t.Container, len(pod.Spec.Containers))
	default:
		res = *pod.Spec.Containers[t.Container].Resources.DeepCopy()
		path = fmt.Sprintf("/spec/containers/%d/resources", t.Container)
	}
	if res.Requests == nil {
		res.Requests = corev1.ResourceList{}
	}
	res.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
	ops := []PatchOp{{Op: "add", Path: path, Value: res}}
	if pod.Annotations == nil {
		ops = append(ops, PatchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{AnnotationSized: Sized(t, milli)}})
	} else {
		ops = append(ops, PatchOp{Op: "add", Path: "/metadata/annotations/" + escapePointer(AnnotationSized), Value: Sized(t, milli)})
	}
	return ops, nil
}

// escapePointer escapes a JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// marshalPatch encodes ops.
func marshalPatch(ops []PatchOp) ([]byte, error) {
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("JSON patch: %w", err)
	}
	return b, nil
}
