package demo

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cgwarden/cgwarden/internal/stats"
)

// parseCPUSeconds reads the CPU time a cgroup was charged: v1
// cpuacct.usage (nanoseconds), v2 cpu.stat's usage_usec.
func parseCPUSeconds(text string, v2 bool) (float64, error) {
	if !v2 {
		ns, err := stats.ParseUint(text)
		if err != nil {
			return 0, err
		}
		return float64(ns) / 1e9, nil
	}
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			us, err := stats.ParseUint(v)
			if err != nil {
				return 0, fmt.Errorf("usage_usec: %w", err)
			}
			return float64(us) / 1e6, nil
		}
	}
	return 0, errors.New("no usage_usec line")
}

// parseProcCgroup reads /proc/<pid>/cgroup and returns the process's
// cgroup in the cpu hierarchy (v1) or the unified one (v2), relative to
// scratch; an error when it is outside the scratch.
func parseProcCgroup(text string, v2 bool, scratch string) (string, error) {
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if (v2 && f[0] == "0" && f[1] == "") || (!v2 && slices.Contains(strings.Split(f[1], ","), "cpu")) {
			if f[2] == scratch {
				return "", nil
			}
			rel, ok := strings.CutPrefix(f[2], scratch+"/")
			if !ok {
				return "", fmt.Errorf("in %s, outside the scratch %s", f[2], scratch)
			}
			return rel, nil
		}
	}
	return "", errors.New("no cpu hierarchy listed")
}
