// Package kubelettree builds, in a scratch cgroup, the tree the kubelet
// builds on a node: its root, the Burstable and BestEffort tiers, pod
// cgroups and their containers' (containerd's names, under the cgroupfs
// or the systemd driver), weighted as the kubelet and the runtime weigh
// them, with the pod metadata a pods file would give for it.
//
// It is what the real-kernel tests (internal/realtest's VMTree) and
// `cgwarden demo` share. It writes through a two-method interface
// (Cgroups) so that each keeps its own scratch cgroup and error handling;
// it never chooses where the scratch is. Names come from layout, weights
// from fairness (the kubelet's MilliCPUToShares and the linear v2
// conversion runtimes before runc 1.3.2 use).
package kubelettree
