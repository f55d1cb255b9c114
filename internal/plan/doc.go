// Package plan describes cgroup changes before anything is changed.
//
// A Plan is a list of operations, each small enough to be journaled and
// undone on its own: create one cgroup directory in one hierarchy, write
// one value to one cgroup file, move every process of a source cgroup into
// a target cgroup (in each hierarchy at once, repeating until the sources
// are empty), and remove one cgroup directory. Every operation names the
// finding it repairs (the audit's rule id, e.g. "misplaced-container") and
// says in plain words what it does.
//
// Adopt builds the plan that puts a misplaced container back under its pod
// cgroup. Policy says where a plan may write: inside the kubelet's tree
// and inside cgroups cgwarden itself creates, with the misplaced source
// cgroup only read (and removed only when asked). Validate checks every
// value against the kernel's range before it is written. The plan is pure
// description; package fix applies it through a journal.
package plan
