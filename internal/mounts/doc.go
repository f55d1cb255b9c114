// Package mounts finds the cgroup hierarchies of a node from its mountinfo
// (proc(5)): cgroup v1 controller mounts, the cgroup2 unified mount, or both
// (hybrid), so that nothing else in cgwarden hard-codes /sys/fs/cgroup.
//
// Parse is pure and takes the text of a mountinfo file; the caller reads it
// from the live host, a host path mounted into a container, or a snapshot.
package mounts
