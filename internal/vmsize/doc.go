// Package vmsize is cgwarden's one size policy for pods that run a
// virtual machine: the names (annotations, labels, API groups, the
// container each VM kind runs its VM in), how a VM object's CPU size is
// read, which pod a VM's size belongs to, and which container of that pod
// is the VM's. The agent (internal/metadata, internal/weights) and the
// sizer (internal/sizer) both decide from here, so they cannot disagree.
// The upper bound an administrator sets on each namespace's sizes
// (--max-size, MaxSizes) is here too: both clamp a size to it alike.
//
// A size buys CPU weight (the agent holds it) or a request (the sizer sets
// it), so it is given only to the pod a VM's controller attests: the pod
// the VM's status names (NeonVM status.podName, KubeVirt
// status.activePods). A pod's own ownerReferences, labels and arguments
// are claims anyone who can create a pod can write — the API server checks
// none of them — and are only hints of which VM to look at.
package vmsize
