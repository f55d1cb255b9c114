package fix

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

var errESRCH = unix.ESRCH

// guard checks every write against the policy before it reaches the
// door; it is the last check, after the whole plan was checked.
type guard struct {
	w     cgroupfs.Writer
	check func(kind plan.Kind, p, value string, moving map[int]bool) error
	// moving is the process a move is writing right now; a cgroup.procs
	// write of anything else is refused.
	moving map[int]bool
	// units sets systemd unit properties (nil: none may be set), each
	// checked by checkUnit first.
	units     *systemd.Grant
	checkUnit func(plan.Op) error
}

// SetProperty sets op's unit property to value (op.Value on apply, the
// journaled old value on revert) after checking op.
func (g *guard) SetProperty(op plan.Op, value string) error {
	op.Value = value
	if g.units == nil || g.checkUnit == nil {
		return fmt.Errorf("%s of %s: no systemd grant: %w", op.Property, op.Unit, plan.ErrPolicy)
	}
	if err := g.checkUnit(op); err != nil {
		return err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64)
	if err != nil {
		return fmt.Errorf("%s of %s: bad value %q: %w", op.Property, op.Unit, value, err)
	}
	return g.units.SetProperty(op.Unit, op.Property, v)
}

func (g *guard) WriteFile(p string, data []byte) error {
	if err := g.check(plan.Write, p, string(data), g.moving); err != nil {
		return err
	}
	return g.w.WriteFile(p, data)
}

func (g *guard) Mkdir(p string) error {
	if err := g.check(plan.Mkdir, p, "", nil); err != nil {
		return err
	}
	return g.w.Mkdir(p)
}

func (g *guard) Rmdir(p string) error {
	if err := g.check(plan.Rmdir, p, "", nil); err != nil {
		return err
	}
	return g.w.Rmdir(p)
}

// applyCheck is the per-write check of an apply: the plan's policy, and
// for cgroup.procs only the process being moved, into a cgroup cgwarden
// owns.
func applyCheck(pol plan.Policy) func(plan.Kind, string, string, map[int]bool) error {
	return func(kind plan.Kind, p, value string, moving map[int]bool) error {
		if kind == plan.Write && path.Base(p) == "cgroup.procs" {
			pid, err := strconv.Atoi(strings.TrimSpace(value))
			if err != nil || !moving[pid] {
				return fmt.Errorf("write %q to %s: not a process the plan moves: %w", value, p, plan.ErrPolicy)
			}
			return pol.CheckTarget(path.Dir(p))
		}
		return pol.Check(plan.Op{Kind: kind, Path: p, Value: value})
	}
}

// exactUnitCheck is the per-property check of a revert: only the units
// and properties the journal's steps name, back to a value in range or
// to unset.
func exactUnitCheck(allowed map[string]bool) func(plan.Op) error {
	return func(op plan.Op) error {
		if !allowed[string(plan.Property)+" "+op.Unit+" "+op.Property+" "+path.Clean(op.Path)] {
			return fmt.Errorf("%s of %s: not something the journal says cgwarden changed: %w", op.Property, op.Unit, plan.ErrPolicy)
		}
		if strings.TrimSpace(op.Value) == strconv.FormatUint(systemd.Unset, 10) {
			return nil
		}
		return plan.Validate(op.File(), op.Value)
	}
}

// exactCheck is the per-write check of a revert: only the exact writes
// the journal's steps call for.
func exactCheck(allowed map[string]bool) func(plan.Kind, string, string, map[int]bool) error {
	return func(kind plan.Kind, p, value string, _ map[int]bool) error {
		if !allowed[string(kind)+" "+path.Clean(p)] {
			return fmt.Errorf("%s %s: not something the journal says cgwarden changed: %w", kind, p, plan.ErrPolicy)
		}
		if kind == plan.Write {
			return plan.Validate(path.Base(p), value)
		}
		return nil
	}
}
