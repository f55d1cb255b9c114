package layout

import (
	"fmt"
	"path"
	"strings"
)

// Where the kubelet's layout puts a container, computed from what the
// kubelet hands the runtime rather than read from a tree: the pod sandbox's
// cgroup parent (CRI LinuxPodSandboxConfig.cgroup_parent). Adopt uses
// ContainerPath to move a misplaced container back; the NRI plugin uses
// PodCgroup and ContainerPath to name the place before it is created.

// PodCgroup turns a pod sandbox's cgroup parent into the pod cgroup's path
// and the kubelet driver it implies. The cgroupfs driver hands the path
// itself (/kubepods/besteffort/pod<uid>). The systemd driver hands the pod
// slice: the kubelet v1.37 with the systemd driver already expanded, as
// /kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice
// (its CgroupName.ToSystemd; seen in the systemd node guest, where
// containerd 2.4 passes it to NRI as the kubelet gave it), or as the bare
// slice name kubepods-besteffort-pod<uid_>.slice, which systemd expands by
// its dashes (SliceDir). A cgroupfs path never ends in ".slice".
func PodCgroup(parent string) (string, Driver, error) {
	switch {
	case parent == "":
		return "", "", fmt.Errorf("no cgroup parent")
	case strings.HasPrefix(parent, "/"):
		if p := path.Clean(parent); p != parent || p == "/" {
			return "", "", fmt.Errorf("cgroup parent %q is not a clean path below the root", parent)
		}
		if base := path.Base(parent); strings.HasSuffix(base, ".slice") {
			dir, err := SliceDir(base)
			if err != nil {
				return "", "", fmt.Errorf("cgroup parent %q: %w", parent, err)
			}
			if dir != parent {
				return "", "", fmt.Errorf("cgroup parent %q ends in slice %s, whose directory is %s", parent, base, dir)
			}
			return parent, Systemd, nil
		}
		return parent, Cgroupfs, nil
	case strings.HasSuffix(parent, ".slice"):
		dir, err := SliceDir(parent)
		if err != nil {
			return "", "", err
		}
		return dir, Systemd, nil
	}
	return "", "", fmt.Errorf("cgroup parent %q is neither an absolute cgroupfs path nor a systemd slice", parent)
}

// SliceDir is the cgroup directory of a systemd slice unit: "a-b-c.slice"
// lives at /a.slice/a-b.slice/a-b-c.slice, and "-.slice" is the root
// (systemd's unit_name_to_path rules, as runc's systemd driver ExpandSlice
// applies them). A name with an empty part ("a--b.slice", "-a.slice") or a
// slash is not a slice name.
func SliceDir(slice string) (string, error) {
	name, ok := strings.CutSuffix(slice, ".slice")
	if !ok || strings.Contains(name, "/") {
		return "", fmt.Errorf("%q is not a systemd slice name", slice)
	}
	if name == "-" {
		return "/", nil
	}
	if name == "" || strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") || strings.Contains(name, "--") {
		return "", fmt.Errorf("%q is not a systemd slice name", slice)
	}
	var b strings.Builder
	prefix := ""
	for part := range strings.SplitSeq(name, "-") {
		if prefix != "" {
			prefix += "-"
		}
		prefix += part
		b.WriteString("/" + prefix + ".slice")
	}
	return b.String(), nil
}

// ContainerPath is the cgroup the kubelet's layout gives a container of
// runtime whose pod's cgroup is podCgroup: the pod's cgroup joined with
// ContainerName.
func ContainerPath(d Driver, runtime, podCgroup, id string) (string, error) {
	name, err := ContainerName(d, runtime, id)
	if err != nil {
		return "", err
	}
	return path.Join(podCgroup, name), nil
}
