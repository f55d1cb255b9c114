package sizer

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// Action is what the controller does for one runner pod.
type Action string

const (
	// ActNone: the pod's request already equals the VM's size.
	ActNone Action = "none"
	// ActResize: patch the pod's resize subresource to To.
	ActResize Action = "resize"
	// ActNotSized: the pod was admitted without any request (BestEffort:
	// the webhook was down, overloaded or could not size it); a resize
	// cannot change its QoS class, only recreating it can. A Burstable pod
	// admitted without a CPU request (it requests memory) is resized
	// instead: its resize adds one (ResizeDecision.Added).
	ActNotSized Action = "not-sized"
	// ActPending: the request equals the size but the kubelet has not
	// applied it (PodResizePending: Infeasible or Deferred). Reported,
	// never retried: the kubelet retries Deferred itself.
	ActPending Action = "pending"
	// ActSkip: not a pod to resize (not running, being deleted).
	ActSkip Action = "skip"
)

// ResizeDecision is the controller's decision for one pod.
type ResizeDecision struct {
	Action Action
	// Container is the container whose request is resized; "" with
	// PodLevel.
	Container string
	// PodLevel: the pod's own request (spec.resources) is resized.
	PodLevel bool
	// From and To are the CPU request now and the one wanted, in
	// milli-CPU.
	From, To int64
	// Added: the pod has no CPU request yet (admitted unsized while the
	// webhook was down or overloaded, failurePolicy Ignore), and the
	// resize adds one (From is 0). The API server takes a resize that
	// adds a request as long as the pod's QoS class stays (v1.37
	// ValidatePodResize refuses only removed requests and limits, and a
	// changed class): a Burstable pod (one with a memory request) stays
	// Burstable with a CPU request and no CPU limit.
	Added bool
	// Reason explains ActNotSized, ActPending and ActSkip, and a size cut to
	// the node's allocatable or to the namespace's --max-size bound.
	Reason string
}

// On names what the decision resizes, for Events and logs: "the pod" or
// "container NAME".
func (d ResizeDecision) On() string {
	if d.PodLevel {
		return "the pod"
	}
	return "container " + d.Container
}

// from is From for Events and logs: "none" when the resize adds the pod's
// first CPU request.
func (d ResizeDecision) from() string {
	if d.Added {
		return "none"
	}
	return vmsize.FormatMilli(d.From)
}

// DecideResize compares a running runner pod's CPU request with its VM's
// live size, vmMilli, bounded by the node's allocatable CPU, allocMilli (0:
// unknown, unbounded), and by the bound of the pod's namespace
// (--max-size, MaxSizes.For; the zero Bound: none): the lower of the two,
// as the agent caps the size it believes (vmsize.Bound.Limit). It follows
// the request where the pod has it: a pod-level CPU request
// (spec.resources, set by the webhook at LevelPod) is resized at pod
// level, whatever the webhook's Level is now; otherwise only the CPU
// request of the container the webhook would have sized.
// Limits and other containers are left. A pod admitted without a CPU
// request (the webhook down, overloaded or out of time: failurePolicy
// Ignore) is given one in place when it is Burstable (Added), and
// reported as ActNotSized when it is BestEffort.
func DecideResize(pod *corev1.Pod, vmMilli, allocMilli int64, bound vmsize.Bound) ResizeDecision {
	if pod.DeletionTimestamp != nil {
		return ResizeDecision{Action: ActSkip, Reason: "being deleted"}
	}
	if pod.Status.Phase != corev1.PodRunning {
		return ResizeDecision{Action: ActSkip, Reason: "not running (" + string(pod.Status.Phase) + ")"}
	}
	var d ResizeDecision
	var res corev1.ResourceRequirements
	if r := pod.Spec.Resources; r != nil && hasCPU(r.Requests) {
		d.PodLevel, res = true, *r
	} else {
		idx, err := vmContainer(pod)
		if err != nil {
			return ResizeDecision{Action: ActSkip, Reason: err.Error()}
		}
		d.Container, res = pod.Spec.Containers[idx].Name, pod.Spec.Containers[idx].Resources
	}
	if to, cut := capped(vmMilli, allocMilli, bound); cut != "" {
		d.To, d.Reason = to, "VM size "+vmsize.FormatMilli(vmMilli)+" "+cut
	} else {
		d.To = vmMilli
	}
	q, ok := res.Requests[corev1.ResourceCPU]
	if !ok {
		switch {
		case bestEffort(pod):
			d.Action, d.Reason = ActNotSized, "admitted without any request (BestEffort); its QoS class cannot change: recreate the pod to size it"
		case hasCPURequest(pod):
			// Another container (or the pod's limit) has one: not a pod
			// the webhook sizes.
			d.Action, d.Reason = ActSkip, d.On()+" has no CPU request"
		default:
			// Admitted unsized but Burstable: sized now, in place. On
			// the pod when it has pod-level resources (the API server
			// resizes those only with InPlacePodLevelResourcesVerticalScaling,
			// which any resize of such a pod needs anyway), else on the
			// VM's container, as the webhook would have.
			if r := pod.Spec.Resources; r != nil && len(r.Requests)+len(r.Limits) > 0 {
				d.PodLevel, d.Container = true, ""
			}
			d.Action, d.Added = ActResize, true
			if d.Reason == "" {
				d.Reason = "admitted without a CPU request: one added"
			} else {
				d.Reason = "admitted without a CPU request: one added, " + d.Reason
			}
		}
		return d
	}
	d.From = q.MilliValue()
	if d.From != d.To {
		if l, ok := res.Limits[corev1.ResourceCPU]; ok && l.MilliValue() < d.To {
			d.Action, d.Reason = ActSkip, fmt.Sprintf("its CPU limit %s is below the size %s", l.String(), vmsize.FormatMilli(d.To))
			return d
		}
		d.Action = ActResize
		return d
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodResizePending && cond.Status == corev1.ConditionTrue {
			d.Action, d.Reason = ActPending, fmt.Sprintf("%s: %s", cond.Reason, cond.Message)
			return d
		}
	}
	d.Action = ActNone
	return d
}

// capped is a size within the node's allocatable CPU (alloc; 0: unknown)
// and its namespace's bound, the lower of the two, and what cut it ("cut
// to the node's allocatable 4", "cut to namespace tenant's --max-size
// bound tenant=2"; "" when not cut).
func capped(milli, alloc int64, bound vmsize.Bound) (int64, string) {
	limit, byNamespace := bound.Limit(alloc)
	switch {
	case limit <= 0 || milli <= limit:
		return milli, ""
	case byNamespace:
		return limit, "cut to " + bound.String()
	}
	return limit, "cut to the node's allocatable " + vmsize.FormatMilli(limit)
}

// bestEffort reports whether pod is in the BestEffort QoS class, which a
// resize cannot change: its status's class as the API server computed it
// at creation, or, where the status has none, no CPU or memory request or
// limit on its containers or the pod (what the slim cache keeps of it).
func bestEffort(pod *corev1.Pod) bool {
	if c := pod.Status.QOSClass; c != "" {
		return c == corev1.PodQOSBestEffort
	}
	return !setsAny(pod, corev1.ResourceCPU, corev1.ResourceMemory)
}

func hasCPU(l corev1.ResourceList) bool {
	_, ok := l[corev1.ResourceCPU]
	return ok
}

// resizePatch is the strategic merge patch, for the pod's resize
// subresource, that sets the CPU request d resizes to d.To: the pod's own
// (spec.resources, which the API server takes from the resize
// subresource only with InPlacePodLevelResourcesVerticalScaling on, and
// otherwise refuses for a pod that has one) or one container's.
func resizePatch(d ResizeDecision) []byte {
	if d.PodLevel {
		return fmt.Appendf(nil, `{"spec":{"resources":{"requests":{"cpu":%q}}}}`, vmsize.FormatMilli(d.To))
	}
	return fmt.Appendf(nil, `{"spec":{"containers":[{"name":%q,"resources":{"requests":{"cpu":%q}}}]}}`, d.Container, vmsize.FormatMilli(d.To))
}

// WithMinStep turns a resize smaller than step milli-CPU into no action, so
// that an autoscaler's small moves do not each cost a PATCH, an Event and a
// kubelet resize. A resize to the pod's cap (limit: the lower of its
// node's allocatable CPU and its namespace's bound, vmsize.Bound.Limit) is
// always made: a VM larger than the cap must not stay below it by less
// than a step; so is one that adds the pod's first CPU request.
func WithMinStep(d ResizeDecision, step, limit int64) ResizeDecision {
	if d.Action != ActResize || d.Added || step <= 0 || (limit > 0 && d.To == limit) {
		return d
	}
	if diff := d.To - d.From; diff < step && -diff < step {
		d.Action = ActNone
		d.Reason = fmt.Sprintf("%s → %s is below the minimum step %s", vmsize.FormatMilli(d.From), vmsize.FormatMilli(d.To), vmsize.FormatMilli(step))
	}
	return d
}
