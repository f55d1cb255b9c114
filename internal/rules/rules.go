// Package rules names the audit's rules. It is a leaf: audit, which finds
// what breaks a rule, and plan, fix and hold, which repair it, share the
// names without depending on one another.
package rules

// The rules, by the ID that findings, plans, journals and flags
// (--only, --fix, --fail-on) carry.
const (
	BestEffortStarvation = "besteffort-starvation"
	SizeBlindWeights     = "size-blind-weights"
	HeldWeights          = "held-weights"
	MisplacedContainer   = "misplaced-container"
	ForeignCgroup        = "foreign-cgroup"
	PodAccountingGap     = "pod-accounting-gap"
	EscapedProcess       = "escaped-process"
	TierDrift            = "tier-drift"
	OrphanCgroup         = "orphan-cgroup"
	IgnoredSize          = "ignored-size"
)
