package sizer

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Action is what the controller does for one runner pod.
type Action string

const (
	// ActNone: the pod's request already equals the VM's size.
	ActNone Action = "none"
	// ActResize: patch the pod's resize subresource to To.
	ActResize Action = "resize"
	// ActNotSized: the pod was admitted without a CPU request (BestEffort:
	// the webhook was down or could not size it); resize cannot change its
	// QoS class, only recreating it can.
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
	// Reason explains ActNotSized, ActPending and ActSkip, and a size cut to
	// the node's allocatable.
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

// DecideResize compares a running runner pod's CPU request with its VM's
// live size, vmMilli, bounded by the node's allocatable CPU, allocMilli (0:
// unknown, unbounded). It follows the request where the pod has it: a
// pod-level CPU request (spec.resources, set by the webhook at LevelPod)
// is resized at pod level, whatever the webhook's Level is now; otherwise
// only the CPU request of the container the webhook would have sized.
// Limits and other containers are left.
func DecideResize(pod *corev1.Pod, vmMilli, allocMilli int64) ResizeDecision {
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
	d.To = vmMilli
	if allocMilli > 0 && d.To > allocMilli {
		d.To = allocMilli
		d.Reason = fmt.Sprintf("VM size %s cut to the node's allocatable %s", FormatMilli(vmMilli), FormatMilli(allocMilli))
	}
	q, ok := res.Requests[corev1.ResourceCPU]
	if !ok {
		if pod.Status.QOSClass == corev1.PodQOSBestEffort || !hasCPURequest(pod) {
			d.Action, d.Reason = ActNotSized, "admitted without a CPU request (BestEffort); its QoS class cannot change: recreate the pod to size it"
			return d
		}
		d.Action, d.Reason = ActSkip, d.On()+" has no CPU request"
		return d
	}
	d.From = q.MilliValue()
	if d.From != d.To {
		if l, ok := res.Limits[corev1.ResourceCPU]; ok && l.MilliValue() < d.To {
			d.Action, d.Reason = ActSkip, fmt.Sprintf("its CPU limit %s is below the size %s", l.String(), FormatMilli(d.To))
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
		return fmt.Appendf(nil, `{"spec":{"resources":{"requests":{"cpu":%q}}}}`, FormatMilli(d.To))
	}
	return fmt.Appendf(nil, `{"spec":{"containers":[{"name":%q,"resources":{"requests":{"cpu":%q}}}]}}`, d.Container, FormatMilli(d.To))
}

// WithMinStep turns a resize smaller than step milli-CPU into no action, so
// that an autoscaler's small moves do not each cost a PATCH, an Event and a
// kubelet resize. A resize to the node's cap (alloc) is always made: a
// VM larger than its node must not stay below the cap by less than a step.
func WithMinStep(d ResizeDecision, step, alloc int64) ResizeDecision {
	if d.Action != ActResize || step <= 0 || (alloc > 0 && d.To == alloc) {
		return d
	}
	if diff := d.To - d.From; diff < step && -diff < step {
		d.Action = ActNone
		d.Reason = fmt.Sprintf("%s → %s is below the minimum step %s", FormatMilli(d.From), FormatMilli(d.To), FormatMilli(step))
	}
	return d
}
