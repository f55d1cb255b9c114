// Package sizer gives pods that run a virtual machine CPU requests equal to
// the VM's size, so that the kubelet itself weighs them (Burstable), and
// keeps those requests equal to the VM's live size.
//
// A pod's QoS class is fixed when it is created: a BestEffort pod can never
// become Burstable by resize. So requests are set at admission, by a
// mutating webhook (Webhook), and later changes go through the pod's
// "resize" subresource (Controller). The decisions — which pods, which
// container, what size, what JSON patch — are pure functions (Find,
// vmsize.FromObject, AnnotationSize, Patch) tested without a cluster; the
// webhook and the controller only read and write the API. The controller's
// informers keep only the fields those functions read (slim.go), and a
// resize the API server refuses is retried with backoff (Controller.RetryBase
// and RetryMax) until it is applied or the VM's size changes.
//
// Pods considered:
//   - NeonVM runner pods: an owner reference of kind VirtualMachine in the
//     vm.neon.tech group, or the label vm.neon.tech/name. Their size is the
//     VirtualMachine's spec.guest.cpus.use.
//   - Pods annotated cgwarden.io/cpu: their size is the annotation's
//     quantity.
//
// A NeonVM runner pod's request goes on the pod itself (spec.resources,
// pod-level resources) where the API server and every node can resize it
// there, else on its VM container (Level, ChooseLevel, ProbeLevel: decided
// once at start); the controller resizes a pod where its request is.
//
// A request is held within the bound the operator sets on the pod's
// namespace (--max-size, vmsize.MaxSizes: the agent caps the sizes it
// believes alike) and, at resize, within its node's allocatable CPU: a
// size above is set at the lower of the two, and the reason said (a
// warning at admission, the resize's Event).
//
// KubeVirt virt-launcher pods are left alone: KubeVirt sets their requests
// itself. A pod that already carries a CPU request is never changed at
// admission. A pod that cannot be sized is admitted unchanged, with a
// warning saying why.
package sizer
