package aggregate

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cgwarden/cgwarden/internal/inventory"
)

// MeminfoPath is where the node's memory totals are read when the root
// cgroup has no usage file (cgroup v2 has no memory.current at the root).
const MeminfoPath = "/proc/meminfo"

// Meminfo is the part of /proc/meminfo the node figures need.
type Meminfo struct {
	TotalBytes uint64
	FreeBytes  uint64
}

// ParseMeminfo reads MemTotal and MemFree (kB) from /proc/meminfo text.
func ParseMeminfo(text string) (Meminfo, error) {
	var m Meminfo
	var haveTotal, haveFree bool
	for _, line := range strings.Split(text, "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || (key != "MemTotal" && key != "MemFree") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return Meminfo{}, fmt.Errorf("meminfo: %s line %q is not \"<n> kB\"", key, clip(line))
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || v > 1<<53 {
			return Meminfo{}, fmt.Errorf("meminfo: %s value %q is not a size", key, clip(f[0]))
		}
		if key == "MemTotal" {
			m.TotalBytes, haveTotal = v*1024, true
		} else {
			m.FreeBytes, haveFree = v*1024, true
		}
	}
	switch {
	case !haveTotal:
		return Meminfo{}, fmt.Errorf("meminfo: no MemTotal line")
	case !haveFree:
		return Meminfo{}, fmt.Errorf("meminfo: no MemFree line")
	case m.FreeBytes > m.TotalBytes:
		return Meminfo{}, fmt.Errorf("meminfo: MemFree %d kB above MemTotal %d kB", m.FreeBytes/1024, m.TotalBytes/1024)
	}
	return m, nil
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// Node is the node's figures: the root cgroup of the scan. When the root
// has no memory usage file (cgroup v2), usage is MemTotal − MemFree, as
// runc's fs2 root statistics (and so cAdvisor and the kubelet) compute it,
// and the working set subtracts the root's inactive_file. mi may be nil
// (no /proc/meminfo, e.g. a snapshot that lacks it): the memory figures
// then stay unknown. The memory limit of the node is MemTotal when known.
func Node(n *inventory.Node, mi *Meminfo) Usage {
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
