// Package scale is cgwarden's scale lane: how the API server's cost of
// cgwarden grows with the number of nodes, pods and VMs, measured against a
// real kube-apiserver and etcd (scripts/scale starts them, on ports of
// their own, with kwok simulating the Nodes and Pods).
//
// What runs:
//   - kwok: simulated Nodes (Ready) and Pods bound to them (Running); among
//     the pods, NeonVM runner pods shaped as NeonVM's controller makes them
//     (label vm.neon.tech/name, a controller owner reference to the
//     VirtualMachine, a neonvm-runner container with -vmspec), and NeonVM
//     VirtualMachine objects of the cluster lane's CRD
//     (test/cluster/testdata/neonvm-crd.json) with the fields NeonVM
//     writes;
//   - the real sizer (cgwarden-sizer, built from ../../cmd/cgwarden-sizer)
//     as a process, with the sizer's own ServiceAccount and RBAC
//     (deploy/kustomize/sizer);
//   - N simulated agents as goroutines of the test: each is the API-facing
//     part of `cgwarden serve --fix` (the pod source, the live VM sizes
//     through hold.MetaSource, the size-trust checker, the Events
//     recorder) with nothing of the cgroup side, its own node name, its own
//     connection to the API server, and the agent's ServiceAccount and RBAC
//     (deploy/kustomize/base).
//
// What is measured, from the API server's own /metrics
// (apiserver_watch_events_total, apiserver_watch_events_sizes,
// apiserver_request_total, apiserver_longrunning_requests) and the agents'
// heap: watch events per VM size change as N grows, an agent's heap as the
// cluster's VMs grow, the sizer under a burst of changes and at a steady
// rate, and the requests idle agents make beyond their watches.
//
// The sizer at scale (TestSizerAtScale, issue 39), over one fleet of VMs
// with Running runner pods: its memory in a cgroup v1 memory cgroup of
// its container's limit (deploy/kustomize/sizer/deployment.yaml), read
// from the cgroup, /proc and its own /metrics; a failover of its two
// leader-elected replicas under a burst of resizes, each replica's
// resize PATCHes counted by a proxy in front of the API server; and its
// webhook, registered with the API server as shipped, under a rate of VM
// pod creations (the API server's admission webhook histogram and the
// client's own timing).
//
// One check is no measurement: the lane installs the sizer's RBAC as
// shipped against a real API server, so TestSizerCannotWidenItsWebhook
// asks that API server, with the sizer's own token, to patch the sizer's
// webhook configuration and expects every write refused.
//
// The lane (scripts/test) asserts only the scaling laws, at sizes a 2-CPU
// machine runs in a few minutes; the benchmarks are the same tests at
// larger sizes (CGWARDEN_SCALE_* variables), with their commands and
// figures in docs/scale.md.
package scale
