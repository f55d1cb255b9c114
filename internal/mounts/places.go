package mounts

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Places says where a cgroup's files live: on v2 every file is under the
// unified mount; on v1 each controller has its own mount (which may be
// shared, as in "cpu,cpuacct").
type Places struct {
	V2                         bool
	Unified                    string
	CPU, CPUAcct, Memory, Pids string
}

// Places derives where a cgroup's files live from the  On hybrid nodes the v1
// controllers are used; the controller-less cgroup2 mount holds no figures.
func (t Table) Places() (Places, error) {
	switch t.Version() {
	case V2:
		u, _ := t.Unified()
		return Places{V2: true, Unified: u.Point}, nil
	case V1, Hybrid:
		var p Places
		for _, c := range []struct {
			name string
			dst  *string
		}{{"cpu", &p.CPU}, {"cpuacct", &p.CPUAcct}, {"memory", &p.Memory}, {"pids", &p.Pids}} {
			if m, ok := t.Controller(c.name); ok {
				*c.dst = m.Point
			}
		}
		if p.CPU == "" {
			return Places{}, errors.New("cgroup v1 without a cpu hierarchy")
		}
		return p, nil
	}
	return Places{}, errors.New("no cgroup hierarchy in mountinfo")
}

// Tree is the mount whose directory tree is walked to find cgroups: the
// unified mount on v2, the cpu mount on v1.
func (p Places) Tree() string {
	if p.V2 {
		return p.Unified
	}
	return p.CPU
}

// Scratch lists the mount points, each once, that a scratch cgroup is made
// in for who (the demo, a test) to weigh and measure it: on v1 those of
// cpu, cpuacct, memory and pids; on v2 the unified mount, whose root must
// enable cpu, memory and pids for its children (readFile reads its
// cgroup.subtree_control).
func (t Table) Scratch(readFile func(string) ([]byte, error), who string) (points []string, v2 bool, err error) {
	switch t.Version() {
	case V2:
		u, _ := t.Unified()
		ctl, err := readFile(path.Join(u.Point, "cgroup.subtree_control"))
		if err != nil {
			return nil, false, err
		}
		for _, c := range []string{"cpu", "memory", "pids"} {
			if !slices.Contains(strings.Fields(string(ctl)), c) {
				return nil, false, fmt.Errorf("controller %s is not enabled in %s/cgroup.subtree_control: %s cannot weigh or measure its pods", c, u.Point, who)
			}
		}
		return []string{u.Point}, true, nil
	case V1, Hybrid:
		for _, c := range []string{"cpu", "cpuacct", "memory", "pids"} {
			m, ok := t.Controller(c)
			if !ok {
				return nil, false, fmt.Errorf("no cgroup v1 %s hierarchy is mounted", c)
			}
			if !slices.Contains(points, m.Point) {
				points = append(points, m.Point)
			}
		}
		return points, false, nil
	}
	return nil, false, errors.New("no cgroup hierarchy is mounted")
}

// FileMount is the mount point that holds a cgroup's file (cpu.shares,
// memory.max): the unified mount on v2, else the v1 mount of the file's
// controller, cpu's for a file of none (cgroup.procs).
func (t Table) FileMount(file string) string {
	if t.Version() == V2 {
		u, _ := t.Unified()
		return u.Point
	}
	ctl, _, _ := strings.Cut(file, ".")
	switch ctl {
	case "cpuacct", "memory", "pids":
	default:
		ctl = "cpu"
	}
	m, _ := t.Controller(ctl)
	return m.Point
}

// ScratchName is the name of a scratch cgroup that process pid makes:
// prefix, the PID and 8 random hex digits. The PID lets a later process
// tell a scratch whose maker was killed before its cleanup (see
// ScratchMaker).
func ScratchName(prefix string, pid int, random [4]byte) string {
	return fmt.Sprintf("%s%d-%x", prefix, pid, random[:])
}

// ScratchMaker is the PID in a name that ScratchName made with prefix;
// ok is false for any other name.
func ScratchMaker(name, prefix string) (pid int, ok bool) {
	rest, found := strings.CutPrefix(name, prefix)
	digits, hex, dash := strings.Cut(rest, "-")
	if !found || !dash || len(hex) != 8 || strings.Trim(hex, "0123456789abcdef") != "" {
		return 0, false
	}
	pid, err := strconv.Atoi(digits)
	if err != nil || pid <= 0 || strconv.Itoa(pid) != digits {
		return 0, false
	}
	return pid, true
}
