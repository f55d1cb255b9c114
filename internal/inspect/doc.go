// Package inspect renders a node's inventory for people (a tree of the
// kubelet's cgroups with weights, limits, guaranteed and used CPU and
// memory, misplaced containers shown under their pod) and for tools (the
// JSON contract of DESIGN.md, whose field names are stable).
package inspect
