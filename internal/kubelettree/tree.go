package kubelettree

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// Cgroups is where a tree is built: a scratch cgroup that makes
// directories (in every hierarchy it spans, enabling controllers on v2)
// and writes files, both relative to itself ("" is the scratch).
type Cgroups interface {
	Mkdir(rel string) error
	Write(rel, file, value string) error
}

// Names are the kubelet's cgroup names under one driver, relative to the
// scratch (DESIGN.md, "Cgroup layouts on a Kubernetes node").
type Names struct {
	Driver                      layout.Driver
	Kube, Burstable, BestEffort string
}

// NamesFor is the kubelet's names under driver d ("" is cgroupfs, the
// kubelet's default).
func NamesFor(d layout.Driver) (Names, error) {
	switch d {
	case layout.Cgroupfs, "":
		return Names{Driver: layout.Cgroupfs, Kube: "kubepods", Burstable: "kubepods/burstable", BestEffort: "kubepods/besteffort"}, nil
	case layout.Systemd:
		return Names{Driver: layout.Systemd, Kube: "kubepods.slice", Burstable: "kubepods.slice/kubepods-burstable.slice",
			BestEffort: "kubepods.slice/kubepods-besteffort.slice"}, nil
	}
	return Names{}, fmt.Errorf("cgroup driver %q: want cgroupfs or systemd", d)
}

// Tier is the cgroup that holds pods of qos: Guaranteed pods sit in the
// kubelet root itself.
func (n Names) Tier(qos string) string {
	switch qos {
	case layout.Burstable:
		return n.Burstable
	case layout.BestEffort:
		return n.BestEffort
	}
	return n.Kube
}

// Pod is a pod's cgroup: pod<uid> with cgroupfs,
// kubepods[-<qos>]-pod<uid_>.slice with systemd.
func (n Names) Pod(qos, uid string) string {
	if n.Driver == layout.Systemd {
		prefix := "kubepods-"
		if qos != layout.Guaranteed {
			prefix += qos + "-"
		}
		return path.Join(n.Tier(qos), prefix+"pod"+strings.ReplaceAll(uid, "-", "_")+".slice")
	}
	return path.Join(n.Tier(qos), "pod"+uid)
}

// Container is the cgroup of containerd's container id in pod: the bare
// ID with cgroupfs, cri-containerd-<id>.scope with systemd.
func (n Names) Container(pod, id string) (string, error) {
	name, err := layout.ContainerName(n.Driver, layout.RuntimeContainerd, id)
	if err != nil {
		return "", err
	}
	return path.Join(pod, name), nil
}

// Pod is one pod of a tree with one container.
type Pod struct {
	Name, UID, QoS string
	// ContainerID is its container's (64 hex digits).
	ContainerID string
	// MilliCPU is the pod's request, or the size a VM pod declares.
	MilliCPU int64
	// Rel and CtrRel are the pod's and its container's cgroups, relative
	// to the scratch.
	Rel, CtrRel string
}

// NewPod names a pod of qos with a random UID and container ID; nothing
// is made.
func (n Names) NewPod(name, qos string, milli int64) (Pod, error) {
	p := Pod{Name: name, UID: RandUID(), QoS: qos, MilliCPU: milli, ContainerID: randHex(32)}
	p.Rel = n.Pod(qos, p.UID)
	var err error
	p.CtrRel, err = n.Container(p.Rel, p.ContainerID)
	return p, err
}

// Tree builds a kubelet tree in C.
type Tree struct {
	Names
	// V2 is set on the unified hierarchy (cpu.weight, not cpu.shares).
	V2 bool
	C  Cgroups
}

// WeightFile is cpu.shares on v1, cpu.weight on v2.
func (t Tree) WeightFile() string { return fairness.WeightFile(t.V2) }

// MaxWeight is the largest weight of the hierarchy.
func (t Tree) MaxWeight() uint64 {
	if t.V2 {
		return fairness.MaxWeight
	}
	return fairness.MaxShares
}

// PodWeight is what the kubelet writes for a pod or tier of these shares,
// and a runtime before runc 1.3.2 for a container: the shares on v1, the
// linear conversion on v2.
func (t Tree) PodWeight(shares uint64) uint64 { return fairness.PodWeight(t.V2, shares) }

// SetWeight writes rel's weight file.
func (t Tree) SetWeight(rel string, w uint64) error {
	return t.C.Write(rel, t.WeightFile(), strconv.FormatUint(w, 10))
}

// BuildKube makes the kubelet root and its tiers, weighted as the kubelet
// weighs them with Burstable pods requesting burstMilli in all and no
// BestEffort request. The scratch itself is weighed at the maximum so that
// the machine's other work takes little from the tree's CPU.
func (t Tree) BuildKube(burstMilli int64) error {
	if err := t.SetWeight("", t.MaxWeight()); err != nil {
		return err
	}
	for _, d := range []string{t.Kube, t.Burstable, t.BestEffort} {
		if err := t.C.Mkdir(d); err != nil {
			return err
		}
	}
	if err := t.SetWeight(t.Burstable, t.PodWeight(fairness.MilliCPUToShares(burstMilli))); err != nil {
		return err
	}
	return t.SetWeight(t.BestEffort, t.PodWeight(fairness.MinShares))
}

// BuildPod makes a pod's cgroup and its container's, both at the weight
// of shares (the kubelet's for a pod, a runtime's for its one container).
func (t Tree) BuildPod(p Pod, shares uint64) error {
	for _, d := range []string{p.Rel, p.CtrRel} {
		if err := t.C.Mkdir(d); err != nil {
			return err
		}
		if err := t.SetWeight(d, t.PodWeight(shares)); err != nil {
			return err
		}
	}
	return nil
}

// Metadata is the pods as a pods file in namespace would give them: the
// VM pods BestEffort with their size in the cgwarden.io/cpu annotation
// (their one container "vm"), the others requesting their MilliCPU (their
// one container "app"), limited to it when Guaranteed.
func Metadata(namespace string, vms []Pod, others ...Pod) []metadata.Pod {
	zero := int64(0)
	var out []metadata.Pod
	for _, p := range vms {
		out = append(out, metadata.Pod{UID: p.UID, Name: p.Name, Namespace: namespace, QoS: layout.BestEffort,
			Annotation:      map[string]string{vmsize.AnnotationCPU: strconv.FormatInt(p.MilliCPU, 10) + "m"},
			RequestMilliCPU: &zero, LimitMilliCPU: &zero,
			Containers: []metadata.Container{{Name: "vm", ID: p.ContainerID, RequestMilliCPU: &zero}}})
	}
	for _, p := range others {
		req, lim := p.MilliCPU, int64(0)
		if p.QoS == layout.Guaranteed {
			lim = req
		}
		out = append(out, metadata.Pod{UID: p.UID, Name: p.Name, Namespace: namespace, QoS: p.QoS,
			RequestMilliCPU: &req, LimitMilliCPU: &lim,
			Containers: []metadata.Container{{Name: "app", ID: p.ContainerID, RequestMilliCPU: &req}}})
	}
	return out
}

// RandUID is a random pod UID in the API's form.
func RandUID() string {
	h := randHex(16)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
