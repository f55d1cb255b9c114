package sizer

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// Annotations and names the sizer reads and writes.
const (
	// AnnotationCPU on a pod asks for that CPU request ("2", "500m") on its
	// VM container.
	AnnotationCPU = "cgwarden.io/cpu"
	// AnnotationCPUContainer names the container to size when the pod has
	// several and none is the NeonVM runner.
	AnnotationCPUContainer = "cgwarden.io/cpu-container"
	// AnnotationSized is written by the sizer: what it set, and from what.
	AnnotationSized = "cgwarden.io/sized"
	// RunnerContainer is the NeonVM runner pod's VM container.
	RunnerContainer = "neonvm-runner"
	// NeonVMGroup is NeonVM's API group.
	NeonVMGroup = "vm.neon.tech"
)

// Source says where a pod's size comes from.
type Source string

const (
	SourceNone       Source = ""
	SourceNeonVM     Source = "neonvm"
	SourceAnnotation Source = "annotation"
)

// Target is a pod the sizer may size: which container, and from what.
type Target struct {
	Source Source
	// Container is the index of the container to size in spec.containers.
	Container int
	// ContainerName is its name.
	ContainerName string
	// VMName is the NeonVM VirtualMachine (in the pod's namespace), for
	// SourceNeonVM.
	VMName string
	// Annotation is the cgwarden.io/cpu value, for SourceAnnotation.
	Annotation string
}

// Find decides whether the sizer should size pod. It returns the target,
// or a reason for leaving the pod alone and whether that reason is worth a
// warning (a pod that asked to be sized but cannot be) rather than silence
// (a pod that is none of the sizer's business).
func Find(pod *corev1.Pod) (t Target, skip string, warn bool) {
	vmName := neonVMName(pod)
	ann, hasAnn := pod.Annotations[AnnotationCPU]
	switch {
	case vmName != "":
		t = Target{Source: SourceNeonVM, VMName: vmName}
	case hasAnn:
		t = Target{Source: SourceAnnotation, Annotation: ann}
	case isKubeVirt(pod):
		return Target{}, "a KubeVirt virt-launcher pod: KubeVirt sets its requests", false
	default:
		return Target{}, "not a VM pod", false
	}
	if hasCPURequest(pod) {
		return Target{}, "the pod already requests CPU", false
	}
	idx, err := vmContainer(pod)
	if err != nil {
		return Target{}, err.Error(), true
	}
	t.Container, t.ContainerName = idx, pod.Spec.Containers[idx].Name
	return t, "", false
}

// neonVMName is the NeonVM VirtualMachine a pod runs: its controller
// owner reference, else its vm.neon.tech/name label.
func neonVMName(pod *corev1.Pod) string {
	for _, o := range pod.OwnerReferences {
		group, _, _ := strings.Cut(o.APIVersion, "/")
		if group == NeonVMGroup && o.Kind == "VirtualMachine" && o.Name != "" {
			return o.Name
		}
	}
	return pod.Labels[metadata.LabelNeonVM]
}

func isKubeVirt(pod *corev1.Pod) bool {
	if _, ok := pod.Labels[metadata.LabelKubeVirt]; ok {
		return true
	}
	for _, o := range pod.OwnerReferences {
		group, _, _ := strings.Cut(o.APIVersion, "/")
		if group == "kubevirt.io" {
			return true
		}
	}
	return false
}

// hasCPURequest reports a CPU request (or limit, which the API server
// copies into requests) on any container or on the pod itself.
func hasCPURequest(pod *corev1.Pod) bool {
	if r := pod.Spec.Resources; r != nil {
		if _, ok := r.Requests[corev1.ResourceCPU]; ok {
			return true
		}
		if _, ok := r.Limits[corev1.ResourceCPU]; ok {
			return true
		}
	}
	for _, c := range pod.Spec.Containers {
		if _, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
			return true
		}
		if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
			return true
		}
	}
	return false
}

// vmContainer picks the container to size: the one cgwarden.io/cpu-container
// names, else neonvm-runner, else the pod's only container.
func vmContainer(pod *corev1.Pod) (int, error) {
	if name, ok := pod.Annotations[AnnotationCPUContainer]; ok {
		for i, c := range pod.Spec.Containers {
			if c.Name == name {
				return i, nil
			}
		}
		return 0, fmt.Errorf("annotation %s names container %q, which the pod does not have", AnnotationCPUContainer, name)
	}
	for i, c := range pod.Spec.Containers {
		if c.Name == RunnerContainer {
			return i, nil
		}
	}
	if len(pod.Spec.Containers) == 1 {
		return 0, nil
	}
	return 0, fmt.Errorf("%d containers, none named %s: say which with annotation %s", len(pod.Spec.Containers), RunnerContainer, AnnotationCPUContainer)
}
