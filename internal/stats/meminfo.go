package stats

import (
	"fmt"
	"strconv"
	"strings"
)

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
