package podsource

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// SlimPod is the agent's pod informer transform (cache.TransformFunc): it
// keeps of a Pod only what cgwarden reads, so the informer's store holds a
// few hundred bytes per pod instead of the whole object (managedFields,
// env, volumes, probes, images and conditions are most of a pod's size and
// none is read), and a tenant cannot grow the agent's memory through what
// it writes on its pods: labels and owner references, which the API server
// bounds only by the object's size on every pod of the node, are kept only
// where cgwarden reads them. Kept:
//   - metadata: name, namespace, uid, resourceVersion (the store's and the
//     reflector's), the VM labels (vmLabels), the cgwarden.io/ annotations
//     (cgwarden.io/cpu, cgwarden.io/cpu-container), a mirror pod's
//     kubernetes.io/config.mirror (its static pod's UID, which names its
//     cgroup) and the first owner reference of each VM kind (vmOwners: a
//     NeonVM runner's owner, a hint of which VM to read);
//   - spec: each init and app container's name, its cpu and memory
//     requests and limits (sizes and the kubelet's QoS rule) and an init
//     container's restartPolicy (sidecars); a NeonVM runner's command and
//     arguments (its -vmspec); the pod's overhead and pod-level resources;
//   - status: qosClass, startTime, and each container status's name,
//     containerID and running start time.
//
// A test checks that a slim pod and its whole object yield the same
// metadata.Pod but for the labels and owners left out, and the same sizes.
// Anything else is returned unchanged (a cache.DeletedFinalStateUnknown
// carries an object already slimmed).
func SlimPod(obj any) (any, error) { return slimPod(obj, false) }

// slimPodAllLabels is SlimPod keeping every label: the CLI's source, for
// its label selectors (Config.AllLabels).
func slimPodAllLabels(obj any) (any, error) { return slimPod(obj, true) }

func slimPod(obj any, allLabels bool) (any, error) {
	k, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	s := &corev1.Pod{TypeMeta: k.TypeMeta}
	s.Name, s.Namespace, s.UID, s.ResourceVersion = k.Name, k.Namespace, k.UID, k.ResourceVersion
	s.Labels, s.OwnerReferences = k.Labels, vmOwners(k.OwnerReferences)
	if !allLabels {
		s.Labels = vmLabels(k.Labels)
	}
	s.Annotations = metadata.OwnAnnotations(k.Annotations)
	if v, ok := k.Annotations[metadata.AnnotationMirror]; ok {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[metadata.AnnotationMirror] = v
	}
	_, runner := k.Labels[vmsize.LabelNeonVM]
	s.Spec.InitContainers = slimContainers(k.Spec.InitContainers, false)
	s.Spec.Containers = slimContainers(k.Spec.Containers, runner)
	s.Spec.Overhead = slimResources(k.Spec.Overhead)
	if r := k.Spec.Resources; r != nil {
		s.Spec.Resources = &corev1.ResourceRequirements{Requests: slimResources(r.Requests), Limits: slimResources(r.Limits)}
	}
	s.Status.QOSClass, s.Status.StartTime = k.Status.QOSClass, k.Status.StartTime
	s.Status.InitContainerStatuses = slimStatuses(k.Status.InitContainerStatuses)
	s.Status.ContainerStatuses = slimStatuses(k.Status.ContainerStatuses)
	s.Status.EphemeralContainerStatuses = slimStatuses(k.Status.EphemeralContainerStatuses)
	return s, nil
}

var _ cache.TransformFunc = SlimPod

// vmLabels keeps of a pod's labels the ones cgwarden reads without a
// selector: the VM labels (vmsize.LabelNeonVM, vmsize.LabelKubeVirt); nil
// when there are none.
func vmLabels(l map[string]string) map[string]string {
	var out map[string]string
	for _, k := range []string{vmsize.LabelNeonVM, vmsize.LabelKubeVirt} {
		if v, ok := l[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// vmOwners keeps of a pod's owner references the first NeonVM
// VirtualMachine and the first KubeVirt VirtualMachineInstance, the only
// ones metadata reads (metadata.VMRefs takes the first; a claim is only a
// hint of which VM to read, the VM's status decides); nil when neither.
func vmOwners(refs []metav1.OwnerReference) []metav1.OwnerReference {
	var out []metav1.OwnerReference
	seen := map[string]bool{}
	for _, o := range refs {
		k := vmsize.OwnerKind(o.APIVersion, o.Kind)
		if o.Name == "" || k == "" || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, metav1.OwnerReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: o.UID})
	}
	return out
}

func slimContainers(cs []corev1.Container, argv bool) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy, Resources: corev1.ResourceRequirements{
			Requests: slimResources(c.Resources.Requests), Limits: slimResources(c.Resources.Limits)}}
		if argv {
			out[i].Command, out[i].Args = c.Command, c.Args
		}
	}
	return out
}

// slimResources keeps cpu and memory: the kubelet's QoS rule reads both,
// sizes read cpu.
func slimResources(l corev1.ResourceList) corev1.ResourceList {
	if l == nil {
		return nil
	}
	out := make(corev1.ResourceList, 2)
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := l[r]; ok {
			out[r] = q
		}
	}
	return out
}

func slimStatuses(ss []corev1.ContainerStatus) []corev1.ContainerStatus {
	if ss == nil {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(ss))
	for i, st := range ss {
		out[i] = corev1.ContainerStatus{Name: st.Name, ContainerID: st.ContainerID}
		if r := st.State.Running; r != nil {
			out[i].State.Running = &corev1.ContainerStateRunning{StartedAt: r.StartedAt}
		}
	}
	return out
}
