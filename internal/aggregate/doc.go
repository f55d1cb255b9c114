// Package aggregate turns a scan (inventory.Node) into the CPU and memory
// figures of pods, containers and the node as a user means them: where the
// processes really are, not where the kubelet looks.
//
// The kubelet takes a pod's figures from the pod cgroup whenever that
// cgroup exists. When a runtime puts a container's cgroup outside the pod
// (seed 003: runwasi's literal "<slice>:cri-containerd:<id>" directory at
// the root; Kata's sandbox cgroups; VM runners), the pod cgroup is empty and
// the pod reads 0. Here a pod's figure is the pod cgroup's own figure — it
// already holds every container nested under it, so nothing is counted
// twice — plus the figure of every container or sandbox cgroup of the pod
// that lives outside it. A pod with no pod cgroup at all is the sum of its
// containers. Container figures come from each container's own cgroup,
// wherever it lives.
//
// Unknown stays unknown: if any part of a sum is unknown (a file missing or
// unreadable, no second sample for a rate), the sum is unknown too, rather
// than a smaller number that looks real.
//
// A limitation worth knowing: a container of pod A whose cgroup sits inside
// pod B's cgroup is counted in A (as misplaced) and in B (inside B's
// cgroup). No runtime is known to do this; subtracting it from B would
// need two counters read at slightly different instants, which can go
// negative.
package aggregate
