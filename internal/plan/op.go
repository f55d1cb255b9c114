package plan

import (
	"path"

	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

// Kind is what an operation does.
type Kind string

const (
	// Mkdir creates one cgroup directory in one hierarchy.
	Mkdir Kind = "mkdir"
	// Write writes one value to one cgroup file.
	Write Kind = "write"
	// Move moves every process (with all its threads) from the source
	// cgroups into the target cgroups, repeating until the sources are
	// empty.
	Move Kind = "move"
	// Rmdir removes one empty cgroup directory.
	Rmdir Kind = "rmdir"
	// Property sets one weight property (CPUWeight, CPUShares) of the
	// systemd unit whose cgroup holds the weight file Path, through
	// systemd's D-Bus API (package systemd): on a node whose kubelet uses
	// the systemd driver, systemd writes the file from the property, and
	// writes it again on every daemon-reload.
	Property Kind = "property"
)

// Rules lists the findings fix can repair: misplaced containers by
// adoption, and the two VM weight rules by weight writes (the sized pods'
// and VM containers' weights, the BestEffort tier's).
var Rules = []string{rules.MisplacedContainer, rules.SizeBlindWeights, rules.BestEffortStarvation}

// Pair is one hierarchy's source and target of a move (host paths of
// cgroup directories).
type Pair struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// Op is one operation of a plan.
type Op struct {
	Kind Kind `json:"kind"`
	// Rule is the finding the operation repairs.
	Rule string `json:"rule"`
	// Pod and Container name what it is done for (pod UID, container ID).
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
	// Description says in plain words what the operation does.
	Description string `json:"description"`
	// Path is the host path of the directory (Mkdir, Rmdir) or file
	// (Write; for Property, the weight file systemd writes) the operation
	// acts on; empty for Move.
	Path string `json:"path,omitempty"`
	// Unit and Property name a Property operation's systemd unit (the
	// slice or scope whose cgroup holds Path) and its property.
	Unit     string `json:"unit,omitempty"`
	Property string `json:"property,omitempty"`
	// Value is what Write writes (Property: the property's value).
	Value string `json:"value,omitempty"`
	// Current is the value (Write) found when the plan was made; the
	// value actually replaced is read again just before writing and
	// journaled.
	Current string `json:"current,omitempty"`
	// Pairs are a Move's sources and targets, one per hierarchy.
	Pairs []Pair `json:"pairs,omitempty"`
	// Scope, on a Move into a pod whose cgroup is a systemd slice (the
	// kubelet's systemd driver, cgroup v2), names the scope that holds
	// the target (cri-containerd-<id>.scope, as runc's systemd driver
	// names it) and the pod's slice: systemd starts the scope with the
	// first process and attaches the rest (systemd.Grant.StartScope,
	// Attach), so the moves are systemd's own. A write to cgroup.procs
	// from a container's cgroup namespace is refused (ENOENT) under
	// systemd's nsdelegate mount, and a directory made behind systemd's
	// back is no unit of its.
	Scope *systemd.Scope `json:"scope,omitempty"`
	// Optional marks a write whose refusal by the kernel does not stop
	// the plan; IfRefused says what that refusal means.
	Optional  bool   `json:"optional,omitempty"`
	IfRefused string `json:"ifRefused,omitempty"`
	// IfGone marks a write whose cgroup may vanish before it is applied
	// (a pod deleted between plan and apply) without stopping the plan;
	// it says what that means.
	IfGone string `json:"ifGone,omitempty"`
	// Keep lists the files whose values Rmdir records so that an undo
	// can recreate the directory as it was.
	Keep []string `json:"keep,omitempty"`
}

// File is the base name of a Write's file.
func (o Op) File() string { return path.Base(o.Path) }

// Prev is the state an operation replaces, read just before it is applied
// and journaled with its intent.
type Prev struct {
	// Value is a Write's file content before the write; for a Property,
	// the property's value before it was set (systemd.Unset,
	// 18446744073709551615, when it was never set).
	Value *string `json:"value,omitempty"`
	// Existed is set when a Mkdir's directory was already there (so
	// nothing was created and nothing is to be removed on undo).
	Existed bool `json:"existed,omitempty"`
	// Pids are the processes found in each source of a Move (by source
	// path) when it started.
	Pids map[string][]int `json:"pids,omitempty"`
	// Values are the files an Rmdir recorded (file name → content).
	Values map[string]string `json:"values,omitempty"`
	// Children are the child cgroups of the directory whose
	// cgroup.subtree_control a Write changes: a child that appears later
	// may use the controllers, and an undo must not take them away.
	Children []string `json:"children,omitempty"`
}

// Skip is something the plan deliberately does not do, and why.
type Skip struct {
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
	// Cgroup is the cgroup left alone, when it is a refused one.
	Cgroup string `json:"cgroup,omitempty"`
	Reason string `json:"reason"`
	// Refused marks a misplaced cgroup the runtime did not confirm as
	// the container it names (Input.Evidence): possibly a decoy, said
	// out loud by the agent (a warning, cgwarden_adoption_refused).
	Refused bool `json:"refused,omitempty"`
}

// Plan is an ordered list of operations.
type Plan struct {
	// Version is the node's cgroup mode (v1, v2, hybrid).
	Version string `json:"cgroupVersion"`
	Driver  string `json:"driver,omitempty"`
	Ops     []Op   `json:"ops"`
	// Notes are what a reader must know about the plan's effect.
	Notes   []string `json:"notes,omitempty"`
	Skipped []Skip   `json:"skipped,omitempty"`
	// Targets are the weight files of sized BestEffort pods and the
	// values the plan holds them at (written or already there).
	Targets []Target `json:"targets,omitempty"`
}
