package sizer

import (
	"slices"
	"strings"

	"github.com/cgwarden/cgwarden/internal/vmsize"
	corev1 "k8s.io/api/core/v1"
)

// AnnotationSized is written by the sizer: what it set, and from what.
// The names it reads (vmsize.AnnotationCPU, vmsize.AnnotationContainer,
// the labels) are the size policy's.
const AnnotationSized = "cgwarden.io/sized"

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
	// PodLevel: the request goes on the pod (spec.resources), not on the
	// container. The webhook sets it for NeonVM runner pods when its
	// Level is LevelPod; Find never does.
	PodLevel bool
}

// sizeOf names what a target's size is, for reasons: "VM size" or
// "annotation cgwarden.io/cpu".
func (t Target) sizeOf() string {
	if t.Source == SourceAnnotation {
		return "annotation " + vmsize.AnnotationCPU
	}
	return "VM size"
}

// Find decides whether the sizer should size pod. It returns the target,
// or a reason for leaving the pod alone and whether that reason is worth a
// warning (a pod that asked to be sized but cannot be) rather than silence
// (a pod that is none of the sizer's business).
func Find(pod *corev1.Pod) (t Target, skip string, warn bool) {
	vmName := neonVMName(pod)
	ann, hasAnn := pod.Annotations[vmsize.AnnotationCPU]
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
		if group == vmsize.NeonVMGroup && o.Kind == "VirtualMachine" && o.Name != "" {
			return o.Name
		}
	}
	return pod.Labels[vmsize.LabelNeonVM]
}

func isKubeVirt(pod *corev1.Pod) bool {
	if _, ok := pod.Labels[vmsize.LabelKubeVirt]; ok {
		return true
	}
	for _, o := range pod.OwnerReferences {
		group, _, _ := strings.Cut(o.APIVersion, "/")
		if group == vmsize.KubeVirtGroup {
			return true
		}
	}
	return false
}

// hasCPURequest reports a CPU request (or limit, which the API server
// copies into requests) on any container or on the pod itself.
func hasCPURequest(pod *corev1.Pod) bool {
	return setsAny(pod, corev1.ResourceCPU)
}

// setsAny reports a request or limit of any of names on any container or
// on the pod itself.
func setsAny(pod *corev1.Pod, names ...corev1.ResourceName) bool {
	sets := func(r corev1.ResourceRequirements) bool {
		for _, l := range []corev1.ResourceList{r.Requests, r.Limits} {
			for _, n := range names {
				if _, ok := l[n]; ok {
					return true
				}
			}
		}
		return false
	}
	if r := pod.Spec.Resources; r != nil && sets(*r) {
		return true
	}
	return slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return sets(c.Resources) })
}

// vmContainer picks the container to size, by the size policy
// (vmsize.Container): the agent weighs that same container with the pod.
func vmContainer(pod *corev1.Pod) (int, error) {
	names := make([]string, len(pod.Spec.Containers))
	for i, c := range pod.Spec.Containers {
		names[i] = c.Name
	}
	return vmsize.Container(names, vmsize.NeonVM, pod.Annotations)
}

// Runner picks, of the pods that carry a NeonVM VirtualMachine's label,
// the one the VM's status names (vmsize.VM.Attests): the only pod the
// resize controller resizes to the VM's size, as it is the only one the
// agent weighs by it. A pod's label, owner references and -vmspec are
// its own claims; the API server checks none of them. Nil when the
// status names none of them (NeonVM writes status.podName once it has
// made the pod; the pod's update then brings it back here).
func Runner(vm vmsize.VM, pods []*corev1.Pod) *corev1.Pod {
	for _, p := range pods {
		if vm.Attests(p.Namespace, p.Name, string(p.UID)) {
			return p
		}
	}
	return nil
}
