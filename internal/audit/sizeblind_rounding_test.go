package audit

import (
	"testing"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// TestSizeBlindIgnoresTheKubeletsRounding: on v2 the kubelet's linear
// conversion maps 10m, 100m and 1000m to weights 1, 4 and 39, which are not
// proportional to the requests (the 10m pod gets 2.5× its share). Each pod
// weighs exactly what the kubelet writes for its size, so nothing is
// size-blind here and an ordinary node must not get an error for it. Two
// VMs of different sizes at the same weight still are.
func TestSizeBlindIgnoresTheKubeletsRounding(t *testing.T) {
	lin := func(m int64) uint64 { return fairness.SharesToWeightLinear(fairness.MilliCPUToShares(m)) }
	bu := "/kubepods.slice/kubepods-burstable.slice"
	meta := metadata.NewSet([]metadata.Pod{
		{UID: uidA, Name: "tiny", Namespace: "ns", QoS: "burstable", RequestMilliCPU: ms(10)},
		{UID: uidB, Name: "small", Namespace: "ns", QoS: "burstable", RequestMilliCPU: ms(100)},
		{UID: uidC, Name: "big", Namespace: "ns", QoS: "burstable", RequestMilliCPU: ms(1000)},
	})
	n := v2Node(t, meta,
		cg{path: "/kubepods.slice", weight: 100},
		cg{path: bu, weight: lin(1110)},
		cg{path: bu + "/kubepods-burstable-pod" + under(uidA) + ".slice", weight: lin(10)},
		cg{path: bu + "/kubepods-burstable-pod" + under(uidB) + ".slice", weight: lin(100)},
		cg{path: bu + "/kubepods-burstable-pod" + under(uidC) + ".slice", weight: lin(1000)},
	)
	if f, ok := find(Run(&Input{Node: n, Meta: meta}), rules.SizeBlindWeights, func(Finding) bool { return true }); ok {
		t.Fatalf("size-blind-weights for pods weighted exactly as the kubelet writes their requests: %s", f.Evidence.Summary)
	}

	be := "/kubepods.slice/kubepods-besteffort.slice"
	vms := metadata.NewSet([]metadata.Pod{
		{UID: uidA, Name: "vm-a", Namespace: "ns", QoS: "besteffort", Annotation: map[string]string{vmsize.AnnotationCPU: "4"}},
		{UID: uidB, Name: "vm-b", Namespace: "ns", QoS: "besteffort", Annotation: map[string]string{vmsize.AnnotationCPU: "250m"}},
	})
	n = v2Node(t, vms,
		cg{path: "/kubepods.slice", weight: 100},
		cg{path: be, weight: 1},
		cg{path: be + "/kubepods-besteffort-pod" + under(uidA) + ".slice", weight: 1},
		cg{path: be + "/kubepods-besteffort-pod" + under(uidB) + ".slice", weight: 1},
	)
	if _, ok := find(Run(&Input{Node: n, Meta: vms}), rules.SizeBlindWeights, func(Finding) bool { return true }); !ok {
		t.Fatal("no size-blind-weights for a 4-CPU and a 0.25-CPU VM at the same weight")
	}
}
