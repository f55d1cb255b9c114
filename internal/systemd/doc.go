// Package systemd is cgwarden's second, narrow door: the one to systemd's
// D-Bus API, through which the CPU weight of a pod's slice or a container's
// scope is set on a node whose kubelet uses the systemd cgroup driver.
//
// On such a node systemd owns the slices and scopes. The kubelet (and runc)
// set CPUWeight (cgroup v2) or CPUShares (v1) as unit properties, and
// systemd writes cpu.weight or cpu.shares from them — again on every
// daemon-reload and whenever it realizes the unit's cgroup anew, so a value
// written into the file behind its back lasts only until then
// (docs/systemd.md has the measurement). cgwarden therefore sets the same
// property the same way the kubelet does (SetUnitProperties with
// runtime=true, go-systemd's dbus package), and systemd keeps it.
//
// Like cgroupfs.Host, a Bus reads freely but writes only through a Grant:
// a writer bound to the units one checked plan names, ended when the plan
// is applied. The properties it may set are the two weights and nothing
// else. A grant of scopes (Bus.GrantScopes) may instead start the named
// transient scopes, each in its named, active pod slice, with the
// processes of a misplaced container: the move adoption makes, made by
// systemd, for an agent in a container's cgroup namespace, whose own
// cgroup.procs writes the kernel refuses under nsdelegate
// (docs/systemd.md, "On a v2 node the agent runs in a cgroup namespace").
//
// Whether a node is such a node is decided in two steps: Detect (systemd
// is PID 1 beneath the host root, sd_booted(3), and its system bus socket
// is there), then, cgroup by cgroup, Bus.Manages (the cgroup is a slice's
// or a scope's, and systemd says that unit's ControlGroup is this path).
package systemd
