package fairness_test

import (
	"fmt"

	"github.com/cgwarden/cgwarden/internal/fairness"
)

// The kubelet turns a CPU request into cpu.shares, and on cgroup v2 the
// shares into cpu.weight: linearly for pod and QoS cgroups, by the OCI
// runtimes' curve for container cgroups. The two disagree in between.
func ExampleMilliCPUToShares() {
	for _, milli := range []int64{0, 100, 250, 1000, 4000} {
		s := fairness.MilliCPUToShares(milli)
		fmt.Printf("%-5s → shares %4d → weight %3d (pod), %3d (container)\n",
			fmt.Sprint(milli, "m"), s, fairness.SharesToWeightLinear(s), fairness.SharesToWeightRuntime(s))
	}
	// Output:
	// 0m    → shares    2 → weight   1 (pod),   1 (container)
	// 100m  → shares  102 → weight   4 (pod),  17 (container)
	// 250m  → shares  256 → weight  10 (pod),  35 (container)
	// 1000m → shares 1024 → weight  39 (pod), 100 (container)
	// 4000m → shares 4096 → weight 157 (pod), 303 (container)
}

// Guarantee: under full contention each group gets the capacity times its
// weight over its siblings', level by level.
func ExampleGuarantee() {
	burstable := &fairness.Group{Weight: 1024, Children: []*fairness.Group{{Weight: 256}, {Weight: 768}}}
	besteffort := &fairness.Group{Weight: 2}
	guaranteed := &fairness.Group{Weight: 3072}
	root := &fairness.Group{Children: []*fairness.Group{guaranteed, burstable, besteffort}}
	fairness.Guarantee(root, 4)
	fmt.Printf("guaranteed %.3f, burstable %.3f (%.3f + %.3f), besteffort %.4f cores\n",
		guaranteed.Guaranteed, burstable.Guaranteed, burstable.Children[0].Guaranteed, burstable.Children[1].Guaranteed, besteffort.Guaranteed)
	// Output:
	// guaranteed 2.999, burstable 1.000 (0.250 + 0.750), besteffort 0.0020 cores
}
