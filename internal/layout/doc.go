// Package layout tells what a cgroup is from its name and its parent: the
// kubelet's root, a QoS tier, a pod, a container, a sandbox, or a cgroup a
// runtime created in the wrong place. It knows both kubelet cgroup drivers
// (cgroupfs and systemd), any --cgroup-root prefix (kind's
// /kubelet.slice/kubelet-kubepods.slice), and the misplaced shapes seen in
// public bug reports (see ../../docs/layouts.md and DESIGN.md).
//
// Classification is a pure step function, Child, applied top-down while a
// tree is walked; it never reads the filesystem. A shape nobody knows is
// Foreign, not guessed.
package layout
