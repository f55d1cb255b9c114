package serve

import (
	"github.com/cgwarden/cgwarden/internal/aggregate"
)

// podName is the pod's name, or "pod<uid>" (the kubelet's cgroupfs name
// for it) when no metadata names it: unnamed pods are still served.
func podName(p *aggregate.Pod) string {
	if p.Name != "" {
		return p.Name
	}
	return "pod" + p.UID
}

// containerName is the container's name, or its ID when no metadata
// names it (or the cgroup's name when the cgroup carries no ID).
func containerName(c *aggregate.Container) string {
	switch {
	case c.Name != "":
		return c.Name
	case c.ID != "":
		return c.ID
	}
	return c.Cgroup.Name()
}
