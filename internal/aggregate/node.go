package aggregate

import (
	"github.com/cgwarden/cgwarden/internal/inventory"
)

// NodeUsage is the node's figures: the root cgroup of the scan. When the
// root has no memory usage file (cgroup v2), usage is MemTotal − MemFree,
// as runc's fs2 root statistics (and so cAdvisor and the kubelet) compute
// it, and the working set subtracts the root's inactive_file. The scan's
// Meminfo may be nil (no /proc/meminfo, e.g. a snapshot that lacks it):
// the memory figures then stay unknown. The memory limit of the node is
// MemTotal when known.
func NodeUsage(n *inventory.Node) Usage {
	mi := n.Meminfo
	u := Own(n.Root)
	u.MemoryLimitBytes = nil
	if mi != nil {
		lim := int64(mi.TotalBytes)
		u.MemoryLimitBytes = &lim
	}
	if u.MemoryUsageBytes == nil && mi != nil {
		usage := mi.TotalBytes - mi.FreeBytes
		u.MemoryUsageBytes = &usage
		if inactive := n.Root.Stats.Memory.InactiveFileBytes; inactive != nil {
			ws := uint64(0)
			if usage > *inactive {
				ws = usage - *inactive
			}
			u.WorkingSetBytes = &ws
		}
	}
	return u
}
