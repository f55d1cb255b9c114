package plan

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

// Role says which cgroup of the kubelet's tree a weight target is.
type Role string

// Roles of weight targets.
const (
	RoleTier      Role = "tier"
	RolePod       Role = "pod"
	RoleContainer Role = "container"
)

// Target is one weight file and the value cgwarden holds it at, with the
// rule it repairs.
type Target struct {
	// Path is the host path of the weight file (v1 cpu.shares, v2
	// cpu.weight).
	Path string `json:"path"`
	// Cgroup is the cgroup's path in its hierarchy.
	Cgroup string `json:"cgroup"`
	Value  uint64 `json:"value"`
	Role   Role   `json:"role"`
	// Pod and Container are the pod UID and container ID it is for
	// (empty for the tier).
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
	// MilliCPU is the size the value stands for: the pod's size, or the
	// sizes the tier counts.
	MilliCPU    int64  `json:"milliCPU"`
	Description string `json:"description"`
	Rule        string `json:"rule"`
	// Unit and Property are set when the weight is held through systemd
	// (a Property operation): the unit whose cgroup holds the file, and
	// CPUWeight or CPUShares.
	Unit     string `json:"unit,omitempty"`
	Property string `json:"property,omitempty"`
}

// Units is what a weight plan needs of systemd on a node whose kubelet
// uses the systemd driver (systemd.Bus): which cgroups are its units, and
// their weight properties.
type Units interface {
	Manages(cgroup string) (unit string, ok bool, err error)
	Property(unit, name string) (uint64, error)
}

// WeightInput is what the weight plan is computed from.
type WeightInput struct {
	Node   *inventory.Node
	Places mounts.Places
	// FS reads the current values of the weight files (Weights only).
	FS   cgroupfs.FS
	Meta *metadata.Set
	// Pod narrows pod and container targets to one pod (UID, name or
	// namespace/name); the tier still counts every sized pod.
	Pod string
	// Only lists the rules to repair; empty means both weight rules: the
	// sized pods' and their VM containers' weights (size-blind-weights),
	// the BestEffort tier's (besteffort-starvation).
	Only []string
	// MaxTierMilliCPU caps the sizes the BestEffort tier's weight counts
	// (0: the node's CPUs). Sized VMs that together declare more than the
	// node has would otherwise outweigh every Burstable pod.
	MaxTierMilliCPU int64
	// Units, on a node run by systemd, says which targets are systemd
	// units: their weights are planned as Property operations, which
	// systemd keeps across daemon-reload. Nil: every weight is a Write.
	Units Units
}

// CheckOnly refuses an --only that names a rule fix does not repair.
func CheckOnly(only []string) error {
	for _, r := range only {
		if !slices.Contains(Rules, r) {
			return fmt.Errorf("--only %s: fix repairs only %s", r, strings.Join(Rules, ", "))
		}
	}
	return nil
}

// Weights plans the writes that bring every weight target (Targets) to
// its value: one Write per target whose file holds something else now,
// or, for a target that is a systemd unit (in.Units), one Property
// operation per unit whose property or file differs. The policy allows
// exactly those files (and their units' properties).
func Weights(in WeightInput) (*Plan, Policy, error) {
	var pol Policy
	p, err := Targets(in)
	if err != nil {
		return nil, pol, err
	}
	if in.Node.KubeRoot != nil {
		for _, h := range Hierarchies(in.Places) {
			pol.Trees = append(pol.Trees, path.Join(h.Point, in.Node.KubeRoot.Path))
		}
	}
	for i := range p.Targets {
		t := &p.Targets[i]
		if t.Path == "" {
			return nil, pol, errors.New("no cpu hierarchy mounted: no weight file to write")
		}
		pol.Weights = append(pol.Weights, t.Path)
		cur, err := readTrim(in.FS, t.Path)
		if errors.Is(err, fs.ErrNotExist) {
			p.Skipped = append(p.Skipped, Skip{Pod: t.Pod, Container: t.Container, Reason: path.Dir(t.Path) + " is gone"})
			continue
		}
		if err != nil {
			return nil, pol, fmt.Errorf("reading %s: %w", t.Path, err)
		}
		v := strconv.FormatUint(t.Value, 10)
		if in.Units != nil {
			op, done, err := propertyOp(in.Units, t, cur, v)
			if err != nil {
				return nil, pol, err
			}
			if op != nil {
				p.Ops = append(p.Ops, *op)
			}
			if done {
				continue
			}
		}
		if cur == v {
			continue
		}
		p.Ops = append(p.Ops, Op{Kind: Write, Rule: t.Rule, Pod: t.Pod, Container: t.Container, Path: t.Path, Value: v, Current: cur,
			IfGone:      "the cgroup is gone (its pod was deleted): nothing to weigh",
			Description: fmt.Sprintf("set %s %s → %s: %s", path.Base(t.Path), cur, v, t.Description)})
	}
	return p, pol, nil
}

// propertyOp plans t through systemd when its cgroup is a unit systemd
// manages: a Property operation when the property or the file is not at
// the target (nil when both are), and done. When systemd does not manage
// the cgroup (a cgroupfs node's, or a directory made behind its back),
// done is false and the caller plans a Write.
func propertyOp(u Units, t *Target, cur, v string) (op *Op, done bool, err error) {
	unit, ok, err := u.Manages(t.Cgroup)
	if err != nil {
		return nil, false, fmt.Errorf("asking systemd about %s: %w", t.Cgroup, err)
	}
	if !ok {
		return nil, false, nil
	}
	name := systemd.WeightProperty(path.Base(t.Path))
	t.Unit, t.Property = unit, name
	pv, err := u.Property(unit, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, true, nil // stopped since it was asked about: nothing to weigh
	}
	if err != nil {
		return nil, false, err
	}
	if strconv.FormatUint(pv, 10) == v && cur == v {
		return nil, true, nil
	}
	was := strconv.FormatUint(pv, 10)
	if pv == systemd.Unset {
		was = "unset"
	}
	return &Op{Kind: Property, Rule: t.Rule, Pod: t.Pod, Container: t.Container, Path: t.Path, Unit: unit, Property: name, Value: v, Current: cur,
		IfGone:      "the unit is gone (its pod was deleted): nothing to weigh",
		Description: fmt.Sprintf("set %s of %s %s → %s through systemd (%s now %s): %s", name, unit, was, v, path.Base(t.Path), cur, t.Description)}, true, nil
}

// MatchPod returns the pods --pod names (every pod when it is empty). A
// bare name two namespaces use is an error, not both pods.
func MatchPod(n *inventory.Node, pod string) ([]*inventory.Pod, error) {
	if pod == "" {
		return n.Pods, nil
	}
	var out []*inventory.Pod
	var names []string
	for _, p := range n.Pods {
		if pod == p.UID || p.Name != "" && (pod == p.Name || pod == p.Namespace+"/"+p.Name) {
			out = append(out, p)
			names = append(names, p.Namespace+"/"+p.Name+" ("+p.UID+")")
		}
	}
	switch len(out) {
	case 0:
		return nil, fmt.Errorf("--pod %s: no such pod on this node (pod names need pod metadata)", pod)
	case 1:
		return out, nil
	}
	return nil, fmt.Errorf("--pod %s matches more than one pod: %s; give namespace/name or the UID", pod, strings.Join(names, ", "))
}
