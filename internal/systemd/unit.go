package systemd

import (
	"context"
	"fmt"
	"os"
	"path"
	"strings"
)

// Properties of a unit's CPU weight: what the kubelet's systemd driver
// (runc's libcontainer/cgroups/systemd) sets for a pod's slice.
const (
	// CPUWeight is cpu.weight on cgroup v2 (1..10000).
	CPUWeight = "CPUWeight"
	// CPUShares is cpu.shares on cgroup v1 (2..262144).
	CPUShares = "CPUShares"
)

// Unset is what systemd reports for a weight property that was never set
// (CGROUP_WEIGHT_INVALID, CGROUP_CPU_SHARES_INVALID: UINT64_MAX); set back,
// it makes the property unset again (`systemctl set-property UNIT
// CPUWeight=` sends the same).
const Unset = ^uint64(0)

// WeightProperty names the unit property behind a weight file (cpu.weight
// or cpu.shares), and "" for any other file.
func WeightProperty(file string) string {
	switch file {
	case "cpu.weight":
		return CPUWeight
	case "cpu.shares":
		return CPUShares
	}
	return ""
}

// UnitOf names the systemd unit whose cgroup is cg (a cgroup path such as
// /kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice):
// its last element, when that is a slice or a scope, the two unit types the
// kubelet's systemd driver and runc create. ok is false for any other
// cgroup (a cgroupfs node's, or a directory made behind systemd's back,
// such as a misplace runtime's literal "kubepods-...slice:cri-containerd:id").
func UnitOf(cg string) (unit string, ok bool) {
	name := path.Base(path.Clean("/" + cg))
	if name == "/" || strings.ContainsAny(name, ":\\") {
		return "", false
	}
	typ := path.Ext(name)
	if (typ != ".slice" && typ != ".scope") || len(name) == len(typ) {
		return "", false
	}
	return name, true
}

// unitType is the D-Bus interface suffix of unit's type ("Slice", "Scope").
func unitType(unit string) (string, error) {
	switch path.Ext(unit) {
	case ".slice":
		return "Slice", nil
	case ".scope":
		return "Scope", nil
	}
	return "", fmt.Errorf("%s: not a slice or a scope", unit)
}

// Node is what Detect found.
type Node struct {
	// Units is set when systemd runs the node and its API is reachable:
	// the kubelet's cgroups that are systemd units (Bus.Manages) get their
	// weights through it.
	Units bool
	// Why says how that was decided, for logs and plan notes.
	Why string
	// Socket is the system bus socket's path beneath the host root.
	Socket string
}

// BusSocket is the system bus socket, relative to the host root.
const BusSocket = "/run/dbus/system_bus_socket"

// Detect decides whether systemd may run the node beneath root: the
// system bus socket is there (OpenNode then asks systemd itself whether it
// answers on it). /run/systemd/system (sd_booted(3)) says systemd runs the
// node, but a container sees it only if it is mounted: the fix mode's
// DaemonSet mounts the bus's directory alone, and systemd's answer on the
// bus is the proof. Whether the kubelet's cgroups are its units is asked
// of systemd itself, cgroup by cgroup (Bus.Manages): a node run by
// systemd may still use the cgroupfs driver.
func Detect(root string) Node {
	sock := path.Join(root, BusSocket)
	_, serr := os.Stat(sock)
	fi, err := os.Stat(path.Join(root, "/run/systemd/system"))
	booted := err == nil && fi.IsDir()
	switch {
	case serr == nil:
		return Node{Units: true, Socket: sock, Why: fmt.Sprintf("the system bus is at %s: the weights of systemd's units are set as unit properties, and containers adopted into pods that are its slices are moved by systemd", sock)}
	case booted:
		return Node{Why: fmt.Sprintf("systemd runs the node, but its system bus is not reachable (%v): weights are written to the cgroup files, and systemd may reset those of its units on daemon-reload", serr)}
	}
	return Node{Why: fmt.Sprintf("systemd is not running beneath %s (no /run/systemd/system, no system bus): weights are written to the cgroup files", root)}
}

// OpenNode connects to systemd when Detect finds it running the node
// beneath root. Without it (nil), why says so and weights are written to
// the cgroup files, as on any cgroupfs node; err is set when systemd runs
// the node but its bus does not answer, which deserves a warning: systemd
// may reset the weights of its units on daemon-reload.
func OpenNode(ctx context.Context, root string) (b *Bus, why string, err error) {
	n := Detect(root)
	if !n.Units {
		return nil, n.Why, nil
	}
	b, err = Open(ctx, n.Socket)
	if err != nil {
		return nil, "", fmt.Errorf("systemd runs the node, but its bus does not answer: weights are written to the cgroup files, and systemd may reset those of its units on daemon-reload: %w", err)
	}
	v, err := b.conn.GetManagerProperty("Version")
	if err != nil {
		b.Close()
		return nil, fmt.Sprintf("the system bus at %s has no systemd on it (%v): weights are written to the cgroup files", n.Socket, err), nil
	}
	return b, n.Why + " (systemd " + strings.Trim(v, `"`) + ")", nil
}
