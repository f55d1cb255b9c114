package plan

import (
	"errors"
	"fmt"
	"path"
	"slices"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

// Policy says where a plan may write. It is checked for every operation
// before the first one is applied, and again for every single write.
type Policy struct {
	// Trees are the host paths of the kubelet's root cgroup in each
	// hierarchy: cgwarden writes only inside them, and there only in
	// cgroups it creates (and the cgroup.subtree_control of their parent).
	Trees []string `json:"trees"`
	// Owned are cgroups cgwarden created (its journal says so) or that
	// the plan creates; only these receive moved processes, and only
	// these may be removed.
	Owned []string `json:"owned,omitempty"`
	// Sources are the misplaced cgroups the plan moves processes out of:
	// read only, and removed only when RemoveSources is set.
	Sources       []string `json:"sources,omitempty"`
	RemoveSources bool     `json:"removeSources,omitempty"`
	// Weights are the weight files (cpu.shares, cpu.weight) of kubelet
	// cgroups whose target the weight plan computed: the one setting of a
	// cgroup cgwarden did not create that it writes.
	Weights []string `json:"weights,omitempty"`
}

// Merge adds q's grants to p (the trees are the node's, the same in both).
func (p *Policy) Merge(q Policy) {
	for _, t := range q.Trees {
		p.Trees = appendOnce(p.Trees, t)
	}
	p.Owned = append(p.Owned, q.Owned...)
	p.Sources = append(p.Sources, q.Sources...)
	p.Weights = append(p.Weights, q.Weights...)
	p.RemoveSources = p.RemoveSources || q.RemoveSources
}

// ErrPolicy marks an operation the policy refuses.
var ErrPolicy = errors.New("refused by cgwarden's write policy")

func (p Policy) inTree(dir string) bool {
	return slices.ContainsFunc(p.Trees, func(t string) bool { return cgroupfs.Within(dir, t) })
}

func (p Policy) owned(dir string) bool {
	return slices.ContainsFunc(p.Owned, func(o string) bool { return cgroupfs.Within(dir, o) }) && p.inTree(dir)
}

// Check tells whether op may be applied.
func (p Policy) Check(op Op) error {
	refuse := func(what string) error { return fmt.Errorf("%s %s: %s: %w", op.Kind, op.Path, what, ErrPolicy) }
	switch op.Kind {
	case Mkdir:
		if !p.owned(op.Path) || slices.Contains(p.Trees, path.Clean(op.Path)) {
			return refuse("not a cgroup cgwarden creates inside the kubelet's tree")
		}
	case Write:
		if op.File() == "cgroup.procs" {
			return refuse("processes are moved only by a move operation")
		}
		if err := Validate(op.File(), op.Value); err != nil {
			return err
		}
		dir := path.Dir(op.Path)
		if !p.inTree(dir) {
			return refuse("outside the kubelet's tree")
		}
		// Settings are written only in cgroups cgwarden creates; the one
		// file of a kubelet cgroup it writes is the subtree_control that
		// lets those new children be limited.
		parentOfOwned := op.File() == "cgroup.subtree_control" &&
			slices.ContainsFunc(p.Owned, func(o string) bool { return path.Dir(path.Clean(o)) == dir })
		weight := (op.File() == "cpu.shares" || op.File() == "cpu.weight") && slices.Contains(p.Weights, path.Clean(op.Path))
		if !p.owned(dir) && !parentOfOwned && !weight {
			return refuse("not a cgroup cgwarden creates (nor the parent of one, for cgroup.subtree_control), nor a weight file the plan computed a target for")
		}
	case Property:
		if err := Validate(op.File(), op.Value); err != nil {
			return err
		}
		dir := path.Dir(op.Path)
		switch {
		case !p.inTree(dir):
			return refuse("outside the kubelet's tree")
		case !slices.Contains(p.Weights, path.Clean(op.Path)):
			return refuse("not a weight the plan computed a target for")
		case op.Property == "" || op.Property != systemd.WeightProperty(op.File()):
			return refuse(fmt.Sprintf("property %q is not the one behind %s", op.Property, op.File()))
		}
		if u, ok := systemd.UnitOf(dir); !ok || u != op.Unit {
			return refuse(fmt.Sprintf("unit %q is not the one whose cgroup holds the weight", op.Unit))
		}
	case Move:
		if len(op.Pairs) == 0 {
			return refuse("nothing to move")
		}
		if sc := op.Scope; sc != nil {
			// systemd moves into a scope it starts in the pod's slice:
			// one target, named as the scope, whose parent is the slice.
			if len(op.Pairs) != 1 || path.Base(op.Pairs[0].Target) != sc.Unit || path.Ext(sc.Unit) != ".scope" {
				return fmt.Errorf("move into scope %s: not the one cgroup the scope holds: %w", sc.Unit, ErrPolicy)
			}
			if u, ok := systemd.UnitOf(path.Dir(op.Pairs[0].Target)); !ok || u != sc.Slice {
				return fmt.Errorf("move into scope %s in %s: not the slice whose cgroup holds the target: %w", sc.Unit, sc.Slice, ErrPolicy)
			}
		}
		for _, pr := range op.Pairs {
			if !slices.Contains(p.Sources, path.Clean(pr.Source)) {
				return fmt.Errorf("move from %s: not a source the plan names: %w", pr.Source, ErrPolicy)
			}
			if err := p.CheckTarget(pr.Target); err != nil {
				return err
			}
		}
	case Rmdir:
		src := slices.Contains(p.Sources, path.Clean(op.Path))
		if !(p.owned(op.Path) || src && p.RemoveSources) {
			return refuse("neither a cgroup cgwarden created nor a source it was asked to remove")
		}
	default:
		return refuse("unknown operation")
	}
	return nil
}

// CheckTarget tells whether processes may be moved into dir: only into a
// cgroup cgwarden created, never into one holding processes it was not
// asked about.
func (p Policy) CheckTarget(dir string) error {
	if !p.owned(dir) {
		return fmt.Errorf("move into %s: not a cgroup cgwarden created: %w", dir, ErrPolicy)
	}
	return nil
}

// CheckAll checks every operation of a plan; the first refusal is
// returned, and then nothing at all may be applied.
func (p Policy) CheckAll(ops []Op) error {
	for i, op := range ops {
		if err := p.Check(op); err != nil {
			return fmt.Errorf("operation %d: %w", i+1, err)
		}
	}
	return nil
}
