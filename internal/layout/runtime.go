package layout

import (
	"fmt"
	"strings"
)

// Runtime naming, both ways, in one place: the kubelet's layout names a
// container's cgroup after the runtime that made it, and reading a name
// tells the runtime back.

// runtimePrefix is the prefix each CRI runtime gives its container
// cgroups' names (cri-containerd-<id>.scope, crio-<id>, docker-<id>.scope).
var runtimePrefix = map[string]string{"containerd": "cri-containerd", "crio": "crio", "docker": "docker"}

// runtimeOf maps a cgroup name prefix to the runtime that makes it.
func runtimeOf(prefix string) string {
	switch prefix {
	case "":
		// A bare 64-hex ID: containerd and cri-dockerd name container
		// cgroups alike under the cgroupfs driver, so the name does not
		// tell. Unknown, not guessed; metadata (the containerID scheme of
		// a pods file, or the CRI) can say.
		return ""
	case "cri-o":
		return "crio"
	case "crio-conmon":
		return "conmon"
	}
	for rt, p := range runtimePrefix {
		if p == prefix {
			return rt
		}
	}
	return prefix
}

// ContainerName is the name the kubelet's layout gives a container's
// cgroup for a driver and runtime: with systemd a scope named for the
// runtime, with cgroupfs the bare ID (CRI-O: crio-<id>).
func ContainerName(d Driver, runtime, id string) (string, error) {
	if len(id) != 64 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", fmt.Errorf("container ID %q is not 64 hex digits", id)
	}
	if d == Cgroupfs && runtime == "" {
		// containerd and cri-dockerd both name it by the bare ID, so an
		// unknown runtime still names it (CRI-O's crio-<id> says so).
		return id, nil
	}
	prefix := runtimePrefix[runtime]
	if prefix == "" {
		return "", fmt.Errorf("runtime %q has no known container cgroup name", runtime)
	}
	switch d {
	case Systemd:
		return prefix + "-" + id + ".scope", nil
	case Cgroupfs:
		if runtime == "crio" {
			return "crio-" + id, nil
		}
		return id, nil
	}
	return "", fmt.Errorf("unknown cgroup driver %q", d)
}
