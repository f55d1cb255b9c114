package mounts

import (
	"bufio"
	"fmt"
	"slices"
	"strings"
)

// Version is the cgroup mode of a node.
type Version string

const (
	// V1 means only cgroup v1 controller hierarchies are mounted.
	V1 Version = "v1"
	// V2 means the unified cgroup2 hierarchy holds the controllers.
	V2 Version = "v2"
	// Hybrid means v1 controllers plus a cgroup2 mount without controllers
	// (systemd's "hybrid" mode); resource control happens in v1.
	Hybrid Version = "hybrid"
)

// Mount is one cgroup hierarchy.
type Mount struct {
	// Point is where the hierarchy is mounted, e.g. /sys/fs/cgroup/cpu.
	Point string
	// Root is the cgroup path of the mount's root inside the hierarchy
	// ("/" unless the mount is of a sub-cgroup, as inside a container).
	Root string
	// V2 is true for a cgroup2 mount.
	V2 bool
	// Controllers lists the v1 controllers of the hierarchy (cpu, cpuacct,
	// memory, ..., and name=systemd); empty for cgroup2.
	Controllers []string
}

// Has reports whether the v1 mount carries controller c.
func (m Mount) Has(c string) bool { return slices.Contains(m.Controllers, c) }

// Table is every cgroup hierarchy of a node.
type Table struct {
	Mounts []Mount
}

// Version tells v1, v2 or hybrid. A table with no cgroup mount is an error
// for the caller; Version then returns "". Where the cpu controller is
// decides: beside a cgroup2 mount, v1 hierarchies without it (a net_cls
// mounted on a v2 node by a VPN client or an old network agent) leave the
// node v2; hybrid is v1 controllers with cpu among them beside cgroup2.
func (t Table) Version() Version {
	var v1, v1CPU, v2 bool
	for _, m := range t.Mounts {
		if m.V2 {
			v2 = true
		} else if slices.ContainsFunc(m.Controllers, isResource) {
			v1 = true
			v1CPU = v1CPU || m.Has("cpu")
		}
	}
	switch {
	case v1CPU && v2:
		return Hybrid
	case v2:
		return V2
	case v1:
		return V1
	}
	return ""
}

// Controller returns the v1 mount that carries controller c.
func (t Table) Controller(c string) (Mount, bool) {
	for _, m := range t.Mounts {
		if !m.V2 && m.Has(c) {
			return m, true
		}
	}
	return Mount{}, false
}

// Unified returns the cgroup2 mount.
func (t Table) Unified() (Mount, bool) {
	for _, m := range t.Mounts {
		if m.V2 {
			return m, true
		}
	}
	return Mount{}, false
}

// Points lists every mount point, for the cgroup filesystem door's policy.
func (t Table) Points() []string {
	out := make([]string, 0, len(t.Mounts))
	for _, m := range t.Mounts {
		out = append(out, m.Point)
	}
	return out
}

// ParseError tells which mountinfo line could not be understood.
type ParseError struct {
	Line int
	Text string
	Why  string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("mountinfo line %d: %s: %q", e.Line, e.Why, e.Text)
}

// Parse reads the cgroup mounts from the text of a mountinfo file. Lines of
// other filesystems are ignored; a cgroup line that cannot be parsed is an
// error, because guessing would put cgroups in the wrong place.
func Parse(text string) (Table, error) {
	var t Table
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			return Table{}, &ParseError{n, line, "no ' - ' separator"}
		}
		f := strings.Fields(pre)
		if len(f) < 6 {
			return Table{}, &ParseError{n, line, "fewer than 6 fields before the separator"}
		}
		p := strings.Fields(post)
		if len(p) < 1 {
			return Table{}, &ParseError{n, line, "no filesystem type"}
		}
		fstype := p[0]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		m := Mount{Root: unescape(f[3]), Point: unescape(f[4]), V2: fstype == "cgroup2"}
		if !m.V2 {
			if len(p) < 3 {
				return Table{}, &ParseError{n, line, "cgroup mount without super options"}
			}
			for _, o := range strings.Split(p[2], ",") {
				switch {
				case o == "rw" || o == "ro" || o == "clone_children" || o == "noprefix" || o == "xattr" ||
					strings.HasPrefix(o, "release_agent=") || o == "cpuset_v2_mode" || o == "favordynmods":
				default:
					m.Controllers = append(m.Controllers, o)
				}
			}
		}
		t.Mounts = append(t.Mounts, m)
	}
	if err := sc.Err(); err != nil {
		return Table{}, fmt.Errorf("mountinfo: %w", err)
	}
	return t, nil
}

// unescape undoes mountinfo's octal escapes (\040 for space, ...). The
// kernel escapes single bytes, so the first digit is at most 3; anything
// else is kept as written rather than wrapped into a wrong byte.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] <= '3' && isOct(s[i+1]) && isOct(s[i+2]) && isOct(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isResource tells a resource controller from a named hierarchy such as
// name=systemd, which controls nothing.
func isResource(c string) bool { return !strings.HasPrefix(c, "name=") }

func isOct(c byte) bool { return c >= '0' && c <= '7' }
