// Package weights computes the CPU weights of pods whose size the kubelet
// cannot see: BestEffort pods (VM runner pods, sandboxes) that declare a
// size through their VM object, the NeonVM runner's own arguments or the
// cgwarden.io/cpu annotation (metadata.DeclaredSize).
//
// The rule is the kubelet's own, applied as if each sized pod requested
// its size: the pod cgroup and its VM container get MilliCPUToShares(size)
// (on cgroup v2 converted as the node converts pods and containers), and
// the BestEffort tier gets 2 + the sum of its sized pods' shares, as the
// kubelet weighs the Burstable tier by the sum of its pods' requests,
// capped at what the node's CPUs would request. Pods without a size keep
// the minimum; pods with requests are never touched.
//
// The package is pure: it reads a scan (inventory.Node) and metadata and
// returns targets. `fix` (package plan) turns them into journaled writes,
// `serve --fix` (package hold) holds them, and `audit` and `inspect` show
// what the pods would be guaranteed under them. See docs/weights.md.
package weights
