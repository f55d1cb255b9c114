package demo

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// The cgroup drivers whose names the demo can give its kubelet tree.
const (
	DriverCgroupfs = "cgroupfs"
	DriverSystemd  = "systemd"
)

// names are the kubelet's cgroup names under one driver, relative to the
// scratch (DESIGN.md, "Cgroup layouts on a Kubernetes node").
type names struct {
	driver                      string
	kube, burstable, bestEffort string
}

func namesFor(driver string) (names, error) {
	switch driver {
	case DriverCgroupfs, "":
		return names{driver: DriverCgroupfs, kube: "kubepods", burstable: "kubepods/burstable", bestEffort: "kubepods/besteffort"}, nil
	case DriverSystemd:
		return names{driver: DriverSystemd, kube: "kubepods.slice", burstable: "kubepods.slice/kubepods-burstable.slice",
			bestEffort: "kubepods.slice/kubepods-besteffort.slice"}, nil
	}
	return names{}, fmt.Errorf("--driver %q: want cgroupfs or systemd", driver)
}

// tier is the cgroup that holds pods of qos: Guaranteed pods sit in the
// kubelet root itself.
func (n names) tier(qos string) string {
	switch qos {
	case "burstable":
		return n.burstable
	case "besteffort":
		return n.bestEffort
	}
	return n.kube
}

// pod and container are a pod's cgroup and its container's: pod<uid> and
// the 64-hex ID with cgroupfs; kubepods[-<qos>]-pod<uid_>.slice and
// cri-containerd-<id>.scope with systemd.
func (n names) pod(qos, uid string) string {
	if n.driver == DriverSystemd {
		prefix := "kubepods-"
		if qos != "guaranteed" {
			prefix += qos + "-"
		}
		return path.Join(n.tier(qos), prefix+"pod"+strings.ReplaceAll(uid, "-", "_")+".slice")
	}
	return path.Join(n.tier(qos), "pod"+uid)
}

func (n names) container(pod, id string) string {
	if n.driver == DriverSystemd {
		return path.Join(pod, "cri-containerd-"+id+".scope")
	}
	return path.Join(pod, id)
}

// The pods' sizes and requests.
const (
	// burstMilli is the Burstable pod's request (seed 000).
	burstMilli = 500
	// misplacedMilli is the request of seed 003's pod, a Guaranteed pod
	// of one CPU.
	misplacedMilli = 1000
)

// vmSizes are seed 000's VM pods, in milli-CPU.
var vmSizes = []int64{1000, 2000, 4000}

// Pod is one pod of the demo.
type Pod struct {
	Name      string `json:"name"`
	UID       string `json:"uid"`
	QoS       string `json:"qos"`
	MilliCPU  int64  `json:"milliCPU"`
	Cgroup    string `json:"cgroup"`
	Container string `json:"containerCgroup"`
	// ContainerID is the container's ID (64 hex digits).
	ContainerID string `json:"containerID"`
	rel, ctrRel string
}

func (n names) newPod(name, qos string, milli int64) Pod {
	p := Pod{Name: name, UID: randUID(), QoS: qos, MilliCPU: milli, ContainerID: randHex(32)}
	p.rel = n.pod(qos, p.UID)
	p.ctrRel = n.container(p.rel, p.ContainerID)
	return p
}

// weightFile is cpu.shares on v1, cpu.weight on v2.
func (s *scratch) weightFile() string {
	if s.v2 {
		return "cpu.weight"
	}
	return "cpu.shares"
}

// podWeight is what the kubelet (and a runtime before runc 1.3.2) writes
// for these shares: the shares on v1, the linear conversion on v2.
func (s *scratch) podWeight(shares uint64) uint64 {
	if s.v2 {
		return fairness.SharesToWeightLinear(shares)
	}
	return shares
}

func (s *scratch) setWeight(rel string, w uint64) error {
	return s.write(rel, s.weightFile(), strconv.FormatUint(w, 10))
}

func (s *scratch) weight(rel string) (uint64, error) {
	v, err := s.read(rel, s.weightFile())
	if err != nil {
		return 0, err
	}
	w, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s/%s: %w", rel, s.weightFile(), err)
	}
	return w, nil
}

// buildKube makes the kubelet root and its tiers, weighted as the kubelet
// weighs them with one Burstable pod of burstMilli. The scratch itself
// is weighed at the maximum so that the machine's other work takes
// little from the demo's CPU.
func (s *scratch) buildKube(n names) error {
	max := uint64(fairness.MaxShares)
	if s.v2 {
		max = fairness.MaxWeight
	}
	if err := s.setWeight("", max); err != nil {
		return err
	}
	for _, d := range []string{n.kube, n.burstable, n.bestEffort} {
		if err := s.mkdir(d); err != nil {
			return err
		}
	}
	if err := s.setWeight(n.burstable, s.podWeight(fairness.MilliCPUToShares(burstMilli))); err != nil {
		return err
	}
	return s.setWeight(n.bestEffort, s.podWeight(fairness.MinShares))
}

// buildPod makes a pod and its container cgroup at the weights of shares.
func (s *scratch) buildPod(p Pod, shares uint64) error {
	for _, d := range []string{p.rel, p.ctrRel} {
		if err := s.mkdir(d); err != nil {
			return err
		}
		if err := s.setWeight(d, s.podWeight(shares)); err != nil {
			return err
		}
	}
	return nil
}

// misplacedRel is seed 003's container cgroup: the literal directory
// runwasi's shim made from containerd's systemd-style cgroupsPath, at the
// top (here: the scratch's top).
func misplacedRel(p Pod) string {
	return "kubepods-pod" + strings.ReplaceAll(p.UID, "-", "_") + ".slice:cri-containerd:" + p.ContainerID
}

// metadataOf is the pods as a pods file would give them: the VM pods
// BestEffort with their size in the cgwarden.io/cpu annotation.
func metadataOf(vms []Pod, others ...Pod) *metadata.Set {
	zero := int64(0)
	var out []metadata.Pod
	for _, p := range vms {
		out = append(out, metadata.Pod{UID: p.UID, Name: p.Name, Namespace: "demo", QoS: "besteffort",
			Annotation:      map[string]string{metadata.AnnotationCPU: strconv.FormatInt(p.MilliCPU, 10) + "m"},
			RequestMilliCPU: &zero, LimitMilliCPU: &zero,
			Containers: []metadata.Container{{Name: "vm", ID: p.ContainerID, RequestMilliCPU: &zero}}})
	}
	for _, p := range others {
		req, lim := p.MilliCPU, int64(0)
		if p.QoS == "guaranteed" {
			lim = req
		}
		out = append(out, metadata.Pod{UID: p.UID, Name: p.Name, Namespace: "demo", QoS: p.QoS,
			RequestMilliCPU: &req, LimitMilliCPU: &lim,
			Containers: []metadata.Container{{Name: "app", ID: p.ContainerID, RequestMilliCPU: &req}}})
	}
	return metadata.NewSet(out)
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
