package mounts

import "errors"

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
