package metadata

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// MaxFileBytes bounds a metadata file; a node's pod list is far smaller.
const MaxFileBytes = 256 << 20

// ParsePods reads the output of `kubectl get pods -A -o json` (a v1
// PodList, or a List of Pods).
func ParsePods(r io.Reader) ([]Pod, error) {
	var list corev1.PodList
	raw, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("pods file: %w", err)
	}
	if len(raw) > MaxFileBytes {
		return nil, fmt.Errorf("pods file: larger than %d MiB", MaxFileBytes>>20)
	}
	if m := hugeExponentJSON.Find(raw); m != nil {
		return nil, fmt.Errorf("pods file: quantity %s has an exponent no resource has (and parsing it would not end)", m)
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("pods file: not a kubectl pod list: %w", err)
	}
	if list.Kind != "" && list.Kind != "List" && list.Kind != "PodList" {
		return nil, fmt.Errorf("pods file: kind %q, want List or PodList of pods", list.Kind)
	}
	out := make([]Pod, 0, len(list.Items))
	for i := range list.Items {
		k := &list.Items[i]
		if k.Kind != "" && k.Kind != "Pod" {
			return nil, fmt.Errorf("pods file: item %d is a %s, not a Pod", i, k.Kind)
		}
		if k.UID == "" {
			return nil, fmt.Errorf("pods file: item %d (%s/%s) has no metadata.uid", i, k.Namespace, k.Name)
		}
		out = append(out, FromAPI(k))
	}
	return out, nil
}

// ReadPodsFile reads a file holding `kubectl get pods -A -o json`; errors
// name the file.
func ReadPodsFile(name string) ([]Pod, error) { return readFile(name, ParsePods) }

// readFile parses the file name with parse; parse's errors name the file.
func readFile[T any](name string, parse func(io.Reader) ([]T, error)) ([]T, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// FromAPI converts a Kubernetes Pod.
func FromAPI(k *corev1.Pod) Pod {
	p := Pod{
		UID: string(k.UID), Name: k.Name, Namespace: k.Namespace,
		Labels: k.Labels, Annotation: OwnAnnotations(k.Annotations),
		QoS: tierName(k.Status.QOSClass), MirrorOf: k.Annotations[AnnotationMirror],
	}
	if k.Status.StartTime != nil {
		p.StartTime = k.Status.StartTime.Time
	}
	if p.QoS == "" {
		p.QoS = tierName(computeQoS(k))
	}
	var lim int64
	limited := len(k.Spec.Containers) > 0
	for _, c := range k.Spec.Containers {
		l := milli(c.Resources.Limits, corev1.ResourceCPU)
		if l == 0 {
			limited = false
		}
		lim += l
	}
	req := podRequestMilliCPU(k)
	p.RequestMilliCPU = &req
	if limited {
		lim += milli(k.Spec.Overhead, corev1.ResourceCPU)
	} else {
		lim = 0
	}
	p.LimitMilliCPU = &lim
	p.VMSize = runnerVMSize(k)
	for _, o := range k.OwnerReferences {
		p.Owners = append(p.Owners, Owner{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: string(o.UID)})
	}
	// Every container the kubelet runs for the pod: init, app and
	// ephemeral (kubectl debug) ones; their IDs are what a misplaced
	// cgroup must name to be adopted into the pod.
	statuses := append(append(append([]corev1.ContainerStatus{}, k.Status.InitContainerStatuses...), k.Status.ContainerStatuses...), k.Status.EphemeralContainerStatuses...)
	for _, st := range statuses {
		c := Container{Name: st.Name, ID: StripScheme(st.ContainerID), Runtime: layout.RuntimeOfContainerID(st.ContainerID), RequestMilliCPU: specRequest(k, st.Name)}
		if st.State.Running != nil {
			c.StartTime = st.State.Running.StartedAt.Time
		}
		p.Containers = append(p.Containers, c)
	}
	return p
}

// OwnAnnotations keeps of a pod's annotations the cgwarden.io/ ones, the
// only ones cgwarden reads (vmsize.AnnotationCPU, the VM container's); nil when
// there are none. Others (kubectl's last-applied-configuration among them)
// can be kilobytes a pod.
func OwnAnnotations(a map[string]string) map[string]string {
	var out map[string]string
	for k, v := range a {
		if strings.HasPrefix(k, "cgwarden.io/") {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// podRequestMilliCPU is the pod's CPU request as the kubelet computes it
// for the pod cgroup's weight and the Burstable tier's
// (k8s.io/component-helpers resource.PodRequests): the app containers'
// sum, raised to the largest init container's request (a sidecar — an init
// container with restartPolicy Always — adds to the sum and to every init
// container started after it), replaced by a pod-level spec.resources
// request when one is set, plus the pod's overhead.
func podRequestMilliCPU(k *corev1.Pod) int64 {
	var req int64
	for _, c := range k.Spec.Containers {
		req += milli(c.Resources.Requests, corev1.ResourceCPU)
	}
	var sidecars, initMax int64
	for _, c := range k.Spec.InitContainers {
		r := milli(c.Resources.Requests, corev1.ResourceCPU)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			req += r
			sidecars += r
			r = sidecars
		} else {
			r += sidecars
		}
		initMax = max(initMax, r)
	}
	req = max(req, initMax)
	if k.Spec.Resources != nil {
		if q, ok := k.Spec.Resources.Requests[corev1.ResourceCPU]; ok {
			req = q.MilliValue()
		}
	}
	return req + milli(k.Spec.Overhead, corev1.ResourceCPU)
}

// specRequest is the CPU request of the (init) container called name.
func specRequest(k *corev1.Pod, name string) *int64 {
	for _, cs := range [][]corev1.Container{k.Spec.InitContainers, k.Spec.Containers} {
		for _, c := range cs {
			if c.Name == name {
				m := milli(c.Resources.Requests, corev1.ResourceCPU)
				return &m
			}
		}
	}
	return nil
}

// StripScheme turns "containerd://<id>" into "<id>".
func StripScheme(id string) string {
	if _, rest, ok := strings.Cut(id, "://"); ok {
		return rest
	}
	return id
}

func milli(l corev1.ResourceList, name corev1.ResourceName) int64 {
	if q, ok := l[name]; ok {
		return q.MilliValue()
	}
	return 0
}

func tierName(q corev1.PodQOSClass) string {
	switch q {
	case corev1.PodQOSGuaranteed:
		return "guaranteed"
	case corev1.PodQOSBurstable:
		return "burstable"
	case corev1.PodQOSBestEffort:
		return "besteffort"
	}
	return ""
}

// computeQoS follows the kubelet's rule (GetPodQOS) for pods whose status
// does not say, over init and app containers alike, zero quantities
// counting as none: no cpu or memory request or limit at all is
// BestEffort; every container limiting both cpu and memory, with the
// summed requests equal to the summed limits, is Guaranteed; anything
// else Burstable. A pod with pod-level cpu or memory requests or limits
// (spec.resources) is classed by those alone, as the kubelet does since
// pod-level resources (ComputePodQOS): Guaranteed when both are limited
// and each request equals its limit, BestEffort when none is set.
func computeQoS(k *corev1.Pod) corev1.PodQOSClass {
	qos := []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}
	if r := k.Spec.Resources; r != nil && (hasAny(r.Requests, qos) || hasAny(r.Limits, qos)) {
		guaranteed := true
		for _, n := range qos {
			req, lim := r.Requests[n], r.Limits[n]
			if lim.Sign() <= 0 || req.Cmp(lim) != 0 {
				guaranteed = false
			}
		}
		if guaranteed {
			return corev1.PodQOSGuaranteed
		}
		return corev1.PodQOSBurstable
	}
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	add := func(l corev1.ResourceList, r corev1.ResourceName, q resource.Quantity) {
		sum := l[r]
		sum.Add(q)
		l[r] = sum
	}
	guaranteed := true
	for _, c := range append(append([]corev1.Container{}, k.Spec.InitContainers...), k.Spec.Containers...) {
		limited := 0
		for _, r := range qos {
			if q, ok := c.Resources.Requests[r]; ok && q.Sign() > 0 {
				add(requests, r, q)
			}
			if q, ok := c.Resources.Limits[r]; ok && q.Sign() > 0 {
				add(limits, r, q)
				limited++
			}
		}
		if limited < len(qos) {
			guaranteed = false
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	if guaranteed && len(requests) == len(limits) {
		for r, req := range requests {
			if lim, ok := limits[r]; !ok || lim.Cmp(req) != 0 {
				guaranteed = false
			}
		}
		if guaranteed {
			return corev1.PodQOSGuaranteed
		}
	}
	return corev1.PodQOSBurstable
}

// hasAny says whether l holds a quantity of one of names.
func hasAny(l corev1.ResourceList, names []corev1.ResourceName) bool {
	for _, n := range names {
		if _, ok := l[n]; ok {
			return true
		}
	}
	return false
}

// hugeExponentJSON finds, in a whole file, a quantity with an exponent of
// four digits or more (see vmsize.Quantity: apimachinery's
// resource.ParseQuantity computes such a number in full, so hostile input
// must not reach it; the API server never stores one).
var hugeExponentJSON = regexp.MustCompile(`(?:"|[:\[,]\s*)[+-]?[0-9.]+[eE][-+]?[0-9]{4,}(?:"|\s*[,\]}])`)

// TierCPU parses --max-tier-cpu (serve and fix alike): a CPU quantity above
// 0 and at most vmsize.MaxMilliCPU, in milli-CPU.
func TierCPU(s string) (int64, error) {
	m, err := vmsize.Quantity(s)
	if err != nil || m <= 0 || m > vmsize.MaxMilliCPU {
		return 0, fmt.Errorf("--max-tier-cpu %q: want a CPU quantity above 0 and at most %d CPUs", s, vmsize.MaxMilliCPU/1000)
	}
	return m, nil
}
