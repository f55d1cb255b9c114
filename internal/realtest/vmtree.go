package realtest

import (
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/kubelettree"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// VMPod is one pod of a VMTree.
type VMPod = kubelettree.Pod

// VMTree is a kubelet-shaped tree (cgroupfs driver) in a scratch cgroup,
// weighted as the kubelet weighs it: BestEffort VM pods of declared sizes
// (the cgwarden.io/cpu annotation) at the minimum weight in a BestEffort
// tier at the minimum, and one Burstable pod in a tier weighed by its
// request — seed 000's layout (docs/findings.md). The tree is
// kubelettree's, as `cgwarden demo` builds it.
type VMTree struct {
	S         *Scratch
	VMs       []VMPod
	Burstable VMPod
	tree      kubelettree.Tree
}

// Kube is the kubelet root of a VMTree, relative to the scratch.
const Kube = "kubepods"

// treeCgroups builds a kubelettree in a Scratch (whose own methods fail
// the test on an error).
type treeCgroups struct{ s *Scratch }

func (c treeCgroups) Mkdir(rel string) error              { c.s.Mkdir(rel); return nil }
func (c treeCgroups) Write(rel, file, value string) error { c.s.Write(rel, file, value); return nil }

// NewVMTree builds the tree with one VM pod per size and a Burstable pod
// requesting burstMilli. The scratch itself is weighed at the maximum so
// that the machine's other work takes little from the test's CPU.
func NewVMTree(s *Scratch, burstMilli int64, sizes ...int64) *VMTree {
	s.t.Helper()
	names, err := kubelettree.NamesFor(layout.Cgroupfs)
	if err != nil {
		s.t.Fatal(err)
	}
	t := &VMTree{S: s, tree: kubelettree.Tree{Names: names, V2: s.V2(), C: treeCgroups{s}}}
	if err := t.tree.BuildKube(burstMilli); err != nil {
		s.t.Fatal(err)
	}
	t.Burstable = t.addPod(layout.Burstable, "app", burstMilli, fairness.MilliCPUToShares(burstMilli))
	for _, m := range sizes {
		t.AddVM(m)
	}
	return t
}

// AddVM adds a BestEffort pod declaring a size of milli at the kubelet's
// weights.
func (t *VMTree) AddVM(milli int64) VMPod {
	p := t.addPod(layout.BestEffort, fmt.Sprintf("vm-%d", len(t.VMs)+1), milli, fairness.MinShares)
	t.VMs = append(t.VMs, p)
	return p
}

func (t *VMTree) addPod(qos, name string, milli int64, shares uint64) VMPod {
	t.S.t.Helper()
	p, err := t.tree.NewPod(name, qos, milli)
	if err != nil {
		t.S.t.Fatal(err)
	}
	if err := t.tree.BuildPod(p, shares); err != nil {
		t.S.t.Fatal(err)
	}
	return p
}

// WeightFile is cpu.shares on v1, cpu.weight on v2.
func (t *VMTree) WeightFile() string { return t.tree.WeightFile() }

// PodWeight is what the kubelet writes for a pod or tier of these shares:
// the shares on v1, the linear conversion on v2.
func (t *VMTree) PodWeight(shares uint64) uint64 { return t.tree.PodWeight(shares) }

// SetWeight writes rel's weight file.
func (t *VMTree) SetWeight(rel string, w uint64) {
	t.S.t.Helper()
	if err := t.tree.SetWeight(rel, w); err != nil {
		t.S.t.Fatal(err)
	}
}

// Weight reads rel's weight file.
func (t *VMTree) Weight(rel string) uint64 {
	t.S.t.Helper()
	v := t.S.Read(rel, t.WeightFile())
	w, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil {
		t.S.t.Fatalf("%s/%s: %v", rel, t.WeightFile(), err)
	}
	return w
}

// Pods is the pod metadata of the tree, as a pods file would give it: the
// VM pods BestEffort with their size in the cgwarden.io/cpu annotation.
func (t *VMTree) Pods() []metadata.Pod {
	return kubelettree.Metadata("default", t.VMs, t.Burstable)
}

// CPUSeconds is the CPU time charged to rel (cgroup accounting, ns
// resolution).
func (s *Scratch) CPUSeconds(rel string) float64 {
	s.t.Helper()
	if s.V2() {
		for _, l := range strings.Split(s.Read(rel, "cpu.stat"), "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				n, _ := strconv.ParseFloat(v, 64)
				return n / 1e6
			}
		}
		s.t.Fatalf("no usage_usec in %s/cpu.stat", rel)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(s.Read(rel, "cpuacct.usage")), 64)
	if err != nil {
		s.t.Fatal(err)
	}
	return n / 1e9
}

// Split is what the tree's pods got over a window.
type Split struct {
	// VMs are the CPU seconds of each VM pod, in VMs order; Burstable
	// the Burstable pod's.
	VMs       []float64
	Burstable float64
}

// VMShare is the VM pods' part of all the CPU the tree's pods got.
func (s Split) VMShare() float64 {
	var vm float64
	for _, v := range s.VMs {
		vm += v
	}
	return vm / (vm + s.Burstable)
}

// PerSize is each VM pod's CPU divided by its size, relative to the mean
// of those: 1 for every pod when the split follows the sizes.
func (s Split) PerSize(t *VMTree) []float64 {
	out := make([]float64, len(s.VMs))
	var mean float64
	for i, v := range s.VMs {
		out[i] = v / float64(t.VMs[i].MilliCPU)
		mean += out[i] / float64(len(s.VMs))
	}
	for i := range out {
		out[i] /= mean
	}
	return out
}

// Measure reads what each pod got over d.
func (t *VMTree) Measure(d time.Duration) Split {
	read := func() Split {
		var sp Split
		for _, p := range t.VMs {
			sp.VMs = append(sp.VMs, t.S.CPUSeconds(p.Rel))
		}
		sp.Burstable = t.S.CPUSeconds(t.Burstable.Rel)
		return sp
	}
	a := read()
	time.Sleep(d)
	b := read()
	for i := range b.VMs {
		b.VMs[i] -= a.VMs[i]
	}
	b.Burstable -= a.Burstable
	return b
}

// BurnAll starts one burner in every pod's container, all pinned to cpu:
// every pod wants a whole CPU and they share one. It returns the
// Burstable pod's burner.
func (t *VMTree) BurnAll(cpu int) *exec.Cmd {
	b := t.S.Burn(t.Burstable.CtrRel, cpu)
	for _, p := range t.VMs {
		t.S.Burn(p.CtrRel, cpu)
	}
	return b
}

// Equal reports the largest relative distance of the VM pods' CPU from
// their mean: 0 when they split equally.
func (s Split) Equal() float64 {
	var mean, worst float64
	for _, v := range s.VMs {
		mean += v / float64(len(s.VMs))
	}
	for _, v := range s.VMs {
		worst = max(worst, math.Abs(v-mean)/mean)
	}
	return worst
}
