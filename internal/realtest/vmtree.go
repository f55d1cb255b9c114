package realtest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// VMPod is one pod of a VMTree.
type VMPod struct {
	UID, Name, ContainerID string
	// MilliCPU is the declared size of a VM pod, or the request of the
	// Burstable pod.
	MilliCPU int64
	// Rel and CtrRel are the pod's and its container's cgroups, relative
	// to the scratch.
	Rel, CtrRel string
}

// VMTree is a kubelet-shaped tree (cgroupfs driver) in a scratch cgroup,
// weighted as the kubelet weighs it: BestEffort VM pods of declared sizes
// (the cgwarden.io/cpu annotation) at the minimum weight in a BestEffort
// tier at the minimum, and one Burstable pod in a tier weighed by its
// request — seed 000's layout (docs/findings.md).
type VMTree struct {
	S         *Scratch
	VMs       []VMPod
	Burstable VMPod
}

// Kube is the kubelet root of a VMTree, relative to the scratch.
const Kube = "kubepods"

// NewVMTree builds the tree with one VM pod per size and a Burstable pod
// requesting burstMilli. The scratch itself is weighed at the maximum so
// that the machine's other work takes little from the test's CPU.
func NewVMTree(s *Scratch, burstMilli int64, sizes ...int64) *VMTree {
	s.t.Helper()
	t := &VMTree{S: s}
	s.Write("", t.WeightFile(), strconv.FormatUint(t.maxWeight(), 10))
	s.Mkdir(Kube)
	s.Mkdir(Kube + "/burstable")
	s.Mkdir(Kube + "/besteffort")
	t.SetWeight(Kube+"/burstable", t.PodWeight(fairness.MilliCPUToShares(burstMilli)))
	t.SetWeight(Kube+"/besteffort", t.PodWeight(fairness.MinShares))
	t.Burstable = t.addPod("burstable", "app", burstMilli)
	t.SetWeight(t.Burstable.Rel, t.PodWeight(fairness.MilliCPUToShares(burstMilli)))
	t.SetWeight(t.Burstable.CtrRel, t.ContainerWeight(fairness.MilliCPUToShares(burstMilli)))
	for _, m := range sizes {
		t.AddVM(m)
	}
	return t
}

// AddVM adds a BestEffort pod declaring a size of milli at the kubelet's
// weights.
func (t *VMTree) AddVM(milli int64) VMPod {
	p := t.addPod("besteffort", fmt.Sprintf("vm-%d", len(t.VMs)+1), milli)
	t.SetWeight(p.Rel, t.PodWeight(fairness.MinShares))
	t.SetWeight(p.CtrRel, t.ContainerWeight(fairness.MinShares))
	t.VMs = append(t.VMs, p)
	return p
}

func (t *VMTree) addPod(tier, name string, milli int64) VMPod {
	p := VMPod{UID: randUID(), Name: name, ContainerID: randHex(32), MilliCPU: milli}
	p.Rel = path.Join(Kube, tier, "pod"+p.UID)
	p.CtrRel = path.Join(p.Rel, p.ContainerID)
	t.S.Mkdir(p.Rel)
	t.S.Mkdir(p.CtrRel)
	return p
}

// WeightFile is cpu.shares on v1, cpu.weight on v2.
func (t *VMTree) WeightFile() string {
	if t.S.V2() {
		return "cpu.weight"
	}
	return "cpu.shares"
}

func (t *VMTree) maxWeight() uint64 {
	if t.S.V2() {
		return fairness.MaxWeight
	}
	return fairness.MaxShares
}

// PodWeight is what the kubelet writes for a pod or tier of these shares:
// the shares on v1, the linear conversion on v2.
func (t *VMTree) PodWeight(shares uint64) uint64 {
	if t.S.V2() {
		return fairness.SharesToWeightLinear(shares)
	}
	return shares
}

// ContainerWeight is what the runtime writes for a container of these
// shares: the linear conversion on v2 too, as runtimes before runc 1.3.2
// do (the weight plan reads the node's conversion off its containers).
func (t *VMTree) ContainerWeight(shares uint64) uint64 { return t.PodWeight(shares) }

// SetWeight writes rel's weight file.
func (t *VMTree) SetWeight(rel string, w uint64) {
	t.S.Write(rel, t.WeightFile(), strconv.FormatUint(w, 10))
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
	zero := int64(0)
	var out []metadata.Pod
	for _, p := range t.VMs {
		out = append(out, metadata.Pod{UID: p.UID, Name: p.Name, Namespace: "default", QoS: "besteffort",
			Annotation:      map[string]string{metadata.AnnotationCPU: strconv.FormatInt(p.MilliCPU, 10) + "m"},
			RequestMilliCPU: &zero, LimitMilliCPU: &zero,
			Containers: []metadata.Container{{Name: "vm", ID: p.ContainerID, RequestMilliCPU: &zero}}})
	}
	b := t.Burstable
	req := b.MilliCPU
	out = append(out, metadata.Pod{UID: b.UID, Name: b.Name, Namespace: "default", QoS: "burstable",
		RequestMilliCPU: &req, LimitMilliCPU: &zero,
		Containers: []metadata.Container{{Name: "app", ID: b.ContainerID, RequestMilliCPU: &req}}})
	return out
}

func randUID() string {
	h := randHex(16)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
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
