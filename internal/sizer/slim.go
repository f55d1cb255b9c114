package sizer

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// The resize controller's informers keep of each object only what it
// reads (DecideResize, vmContainer, hasCPURequest, vmsize.FromObject and
// the controller's sync): a whole runner pod is several KiB (managedFields,
// the runner's -vmspec argument, env, volumes, conditions) and a whole
// VirtualMachine about 2 KiB, where the fields read are a few hundred
// bytes. Each transform (a cache.TransformFunc: slimRunnerPod,
// nodeAllocatableOnly, vmsize.Slim) is idempotent, and returns anything
// that is not its kind unchanged: a cache.DeletedFinalStateUnknown
// tombstone carries an object the store already slimmed.

// slimRunnerPod keeps of a runner pod:
//   - metadata: name, namespace, uid, resourceVersion (the store's and the
//     reflector's), deletionTimestamp (a pod being deleted is skipped),
//     the vm.neon.tech/name label (the lister's selector, the key of the
//     pod's VM) and the cgwarden.io/cpu-container annotation (which
//     container runs the VM: vmContainer);
//   - spec: nodeName (its node's allocatable CPU), each container's name
//     and resources, the pod-level resources;
//   - status: phase, qosClass and the PodResizePending condition.
//
// Nothing else: owner references and the other annotations are read only
// by the webhook, of the pod under review, never of the cache; and
// DecideResize compares the VM's size with the spec, learning that the
// kubelet has not applied it from PodResizePending alone, not from the
// container statuses.
func slimRunnerPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	s := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
		DeletionTimestamp: p.DeletionTimestamp,
	}}
	if v, ok := p.Labels[vmsize.LabelNeonVM]; ok {
		s.Labels = map[string]string{vmsize.LabelNeonVM: v}
	}
	if v, ok := p.Annotations[vmsize.AnnotationContainer]; ok {
		s.Annotations = map[string]string{vmsize.AnnotationContainer: v}
	}
	s.Spec.NodeName, s.Spec.Resources = p.Spec.NodeName, p.Spec.Resources
	if p.Spec.Containers != nil {
		s.Spec.Containers = make([]corev1.Container, len(p.Spec.Containers))
		for i, c := range p.Spec.Containers {
			s.Spec.Containers[i] = corev1.Container{Name: c.Name, Resources: c.Resources}
		}
	}
	s.Status.Phase, s.Status.QOSClass = p.Status.Phase, p.Status.QOSClass
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodResizePending {
			s.Status.Conditions = append(s.Status.Conditions, c)
		}
	}
	return s, nil
}

// nodeAllocatableOnly is the node informer's transform: a Node's name and
// allocatable CPU, nothing else.
func nodeAllocatableOnly(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown tombstone
	}
	slim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion, UID: n.UID}}
	if q, ok := n.Status.Allocatable[corev1.ResourceCPU]; ok {
		slim.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: q}
	}
	return slim, nil
}
