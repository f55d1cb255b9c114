package demo

import (
	"strconv"
	"strings"

	"github.com/cgwarden/cgwarden/internal/kubelettree"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// The cgroup drivers whose names the demo can give its kubelet tree.
const (
	DriverCgroupfs = string(layout.Cgroupfs)
	DriverSystemd  = string(layout.Systemd)
)

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

// newPod names a pod of the kubelet tree.
func newPod(n kubelettree.Names, name, qos string, milli int64) (Pod, error) {
	k, err := n.NewPod(name, qos, milli)
	if err != nil {
		return Pod{}, err
	}
	return Pod{Name: k.Name, UID: k.UID, QoS: k.QoS, MilliCPU: k.MilliCPU, ContainerID: k.ContainerID, rel: k.Rel, ctrRel: k.CtrRel}, nil
}

// treePod is p as kubelettree knows it.
func (p Pod) treePod() kubelettree.Pod {
	return kubelettree.Pod{Name: p.Name, UID: p.UID, QoS: p.QoS, MilliCPU: p.MilliCPU, ContainerID: p.ContainerID, Rel: p.rel, CtrRel: p.ctrRel}
}

func treePods(ps []Pod) []kubelettree.Pod {
	out := make([]kubelettree.Pod, len(ps))
	for i, p := range ps {
		out[i] = p.treePod()
	}
	return out
}

// treeCgroups builds a kubelettree in the scratch.
type treeCgroups struct{ s *scratch }

func (c treeCgroups) Mkdir(rel string) error              { return c.s.mkdir(rel) }
func (c treeCgroups) Write(rel, file, value string) error { return c.s.write(rel, file, value) }

// weight reads rel's weight file.
func (d *run) weight(rel string) (uint64, error) {
	return readAs(d.s, rel, d.tree.WeightFile(), func(v string) (uint64, error) { return strconv.ParseUint(v, 10, 64) })
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
	return metadata.NewSet(kubelettree.Metadata("demo", treePods(vms), treePods(others)...))
}
