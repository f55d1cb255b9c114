// Package inspect renders a node's inventory for people and for tools.
//
// For people (WriteText): a tree of the kubelet's cgroups as a table with
// weights (SHARES on v1, WEIGHT on v2), quotas, guaranteed and used CPU
// and memory, one number format per column and the units under the
// headers; fitted to the terminal by cutting long cgroup names in the
// middle (-o wide keeps them whole); a misplaced container shown once,
// under its pod, marked, with the path where it really is; a guarantee a
// CPU quota caps shown as the quota, marked, with a footnote.
//
// For tools (Build, NewReport): the JSON contract of DESIGN.md, whose
// field names are stable, under the naming conventions that every
// command's JSON shares (docs/schemas/inspect.schema.json).
package inspect
