// Package weights shows what the weights of pods whose size the kubelet
// cannot see guarantee them: BestEffort pods (VM runner pods, sandboxes)
// that declare a size through their VM object, the NeonVM runner's own
// arguments or the cgwarden.io/cpu annotation (metadata.DeclaredSize).
//
// The targets are plan.Targets' (the kubelet's own rule, applied as if
// each sized pod requested its size; see docs/weights.md). Views puts
// each sized pod's weight now beside its target, and its CPU under full
// contention now, at the targets and at the kubelet's minimum: what
// `audit` and `inspect` show. The package is pure: it reads a scan
// (inventory.Node) and metadata.
package weights
