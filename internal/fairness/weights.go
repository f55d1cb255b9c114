package fairness

import "math"

// Limits of the v1 cpu.shares and v2 cpu.weight files (kernel
// sched/core.c; kubelet pkg/kubelet/cm/helpers_linux.go).
const (
	MinShares     = 2
	MaxShares     = 262144
	DefaultShares = 1024
	MinWeight     = 1
	MaxWeight     = 10000
	DefaultWeight = 100
	// ThreadWeightV1 is how a nice-0 thread weighs against sibling
	// groups when it sits directly in a non-leaf v1 cgroup.
	ThreadWeightV1 = 1024
)

// MilliCPUToShares is the kubelet's conversion of a CPU request in
// milli-CPU to cpu.shares: 0 → 2, else m*1024/1000 clamped to [2, 262144].
func MilliCPUToShares(milli int64) uint64 {
	if milli <= 0 {
		return MinShares
	}
	s := milli * DefaultShares / 1000
	return uint64(min(max(s, MinShares), MaxShares))
}

// SharesToWeightLinear is the kubelet's v1→v2 conversion (KEP-2254), used
// for pod and QoS cgroups: 1 + ((s-2)*9999)/262142 with integer division.
func SharesToWeightLinear(shares uint64) uint64 {
	s := min(max(shares, MinShares), MaxShares)
	return 1 + ((s-2)*9999)/262142
}

// SharesToWeightRuntime is the conversion of opencontainers/cgroups ≥
// v0.0.3 (runc ≥ 1.3.2, crun ≥ 1.23), used for container cgroups:
// 0 → unset (returned as 0); ≤2 → 1; ≥262144 → 10000; else with
// L = log2(s), ceil(10^((L*L + 125*L)/612 − 7/34)). It maps 1024 to 100.
func SharesToWeightRuntime(shares uint64) uint64 {
	switch {
	case shares == 0:
		return 0
	case shares <= MinShares:
		return MinWeight
	case shares >= MaxShares:
		return MaxWeight
	}
	l := math.Log2(float64(shares))
	exp := (l*l+125*l)/612 - 7.0/34
	return uint64(math.Ceil(math.Pow(10, exp)))
}

// PodWeight is the weight the kubelet writes for a pod or QoS cgroup of
// these shares: the shares on v1 (v2 false), their linear conversion on v2.
func PodWeight(v2 bool, shares uint64) uint64 {
	if v2 {
		return SharesToWeightLinear(shares)
	}
	return shares
}

// WeightFile is the name of the CPU weight file on a cgroup version.
func WeightFile(v2 bool) string {
	if v2 {
		return "cpu.weight"
	}
	return "cpu.shares"
}
