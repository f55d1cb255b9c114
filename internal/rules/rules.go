// Package rules names the audit's rules, each once. It is a leaf: audit,
// which finds what breaks a rule, and plan, fix and hold, which repair it,
// share the names without depending on one another.
package rules

// The rules, by the ID that findings, plans, journals and flags
// (--only, --fix, --fail-on) carry; audit's check of each says more.
const (
	// BestEffortStarvation: a BestEffort pod guaranteed too little CPU.
	BestEffortStarvation = "besteffort-starvation"
	// SizeBlindWeights: sibling pods' weights do not follow their sizes.
	SizeBlindWeights = "size-blind-weights"
	// HeldWeights: sized pods' weights are held at their sizes (info).
	HeldWeights = "held-weights"
	// MisplacedContainer: a container cgroup outside its pod's cgroup.
	MisplacedContainer = "misplaced-container"
	// ForeignCgroup: a cgroup named like a pod's container it is not.
	ForeignCgroup = "foreign-cgroup"
	// PodAccountingGap: a pod cgroup counting less than its containers.
	PodAccountingGap = "pod-accounting-gap"
	// EscapedProcess: a pod's processes outside the kubelet's tree.
	EscapedProcess = "escaped-process"
	// TierDrift: a weight that is not what the kubelet would write.
	TierDrift = "tier-drift"
	// OrphanCgroup: a pod cgroup with no pod in the metadata.
	OrphanCgroup = "orphan-cgroup"
	// IgnoredSize: a pod's declared CPU size is not taken.
	IgnoredSize = "ignored-size"
)
