package mounts

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Fixtures (testdata/*.mountinfo):
//   - hybrid-this-machine: copied from /proc/self/mountinfo of the
//     development VM (Linux 6.18, v1 controllers on separate mounts, a
//     controller-less cgroup2 at /sys/fs/cgroup/unified).
//   - v2-ubuntu: an Ubuntu 22.04 node (systemd unified mode).
//   - v1-al2-eks: an Amazon Linux 2 EKS node (seed 000's OS), cpu and
//     cpuacct co-mounted as "cpu,cpuacct".
//   - v1-container: what a pod sees on such a node without a cgroup
//     namespace: every hierarchy mounted from the container's own cgroup,
//     so Root is not "/".
//   - escapes: mount points with octal escapes (\040 space, \134
//     backslash, \011 tab), as the kernel writes them.

func readFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseFixtures(t *testing.T) {
	const ctr = "/kubepods/besteffort/pod0f3c4d2a-8b1e-4f6a-9c7d-2e5b8a1f0c3d/6a3f1e9b0c2d4e5f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f"
	tests := []struct {
		file    string
		version Version
		mounts  []Mount
		// controller → mount point, "" for not mounted
		places  map[string]string
		unified string
	}{
		{
			file:    "hybrid-this-machine.mountinfo",
			version: Hybrid,
			mounts: []Mount{
				{Point: "/sys/fs/cgroup/cpu", Root: "/", Controllers: []string{"cpu"}},
				{Point: "/sys/fs/cgroup/cpuacct", Root: "/", Controllers: []string{"cpuacct"}},
				{Point: "/sys/fs/cgroup/cpuset", Root: "/", Controllers: []string{"cpuset"}},
				{Point: "/sys/fs/cgroup/memory", Root: "/", Controllers: []string{"memory"}},
				{Point: "/sys/fs/cgroup/devices", Root: "/", Controllers: []string{"devices"}},
				{Point: "/sys/fs/cgroup/freezer", Root: "/", Controllers: []string{"freezer"}},
				{Point: "/sys/fs/cgroup/blkio", Root: "/", Controllers: []string{"blkio"}},
				{Point: "/sys/fs/cgroup/pids", Root: "/", Controllers: []string{"pids"}},
				{Point: "/sys/fs/cgroup/systemd", Root: "/", Controllers: []string{"name=systemd"}},
				{Point: "/sys/fs/cgroup/unified", Root: "/", V2: true},
			},
			places:  map[string]string{"cpu": "/sys/fs/cgroup/cpu", "cpuacct": "/sys/fs/cgroup/cpuacct", "memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids", "hugetlb": ""},
			unified: "/sys/fs/cgroup/unified",
		},
		{
			file:    "v2-ubuntu.mountinfo",
			version: V2,
			mounts:  []Mount{{Point: "/sys/fs/cgroup", Root: "/", V2: true}},
			places:  map[string]string{"cpu": "", "memory": ""},
			unified: "/sys/fs/cgroup",
		},
		{
			// A cgroup v2 node where a VPN client or an old network agent
			// mounted a v1 net_cls hierarchy: the CPU controller is on v2,
			// so the node is v2, not hybrid (hybrid means the figures are
			// in v1 hierarchies, which here hold none of them).
			file:    "v2-with-v1-net_cls.mountinfo",
			version: V2,
			mounts: []Mount{
				{Point: "/sys/fs/cgroup", Root: "/", V2: true},
				{Point: "/sys/fs/cgroup/net_cls", Root: "/", Controllers: []string{"net_cls"}},
			},
			places:  map[string]string{"cpu": "", "net_cls": "/sys/fs/cgroup/net_cls"},
			unified: "/sys/fs/cgroup",
		},
		{
			file:    "v1-al2-eks.mountinfo",
			version: V1,
			mounts: []Mount{
				{Point: "/sys/fs/cgroup/systemd", Root: "/", Controllers: []string{"name=systemd"}},
				{Point: "/sys/fs/cgroup/net_cls,net_prio", Root: "/", Controllers: []string{"net_cls", "net_prio"}},
				{Point: "/sys/fs/cgroup/cpu,cpuacct", Root: "/", Controllers: []string{"cpu", "cpuacct"}},
				{Point: "/sys/fs/cgroup/cpuset", Root: "/", Controllers: []string{"cpuset"}},
				{Point: "/sys/fs/cgroup/memory", Root: "/", Controllers: []string{"memory"}},
				{Point: "/sys/fs/cgroup/hugetlb", Root: "/", Controllers: []string{"hugetlb"}},
				{Point: "/sys/fs/cgroup/blkio", Root: "/", Controllers: []string{"blkio"}},
				{Point: "/sys/fs/cgroup/perf_event", Root: "/", Controllers: []string{"perf_event"}},
				{Point: "/sys/fs/cgroup/devices", Root: "/", Controllers: []string{"devices"}},
				{Point: "/sys/fs/cgroup/freezer", Root: "/", Controllers: []string{"freezer"}},
				{Point: "/sys/fs/cgroup/pids", Root: "/", Controllers: []string{"pids"}},
			},
			places: map[string]string{"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct", "memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids"},
		},
		{
			file:    "v1-container.mountinfo",
			version: V1,
			mounts: []Mount{
				{Point: "/sys/fs/cgroup/systemd", Root: ctr, Controllers: []string{"name=systemd"}},
				{Point: "/sys/fs/cgroup/cpu,cpuacct", Root: ctr, Controllers: []string{"cpu", "cpuacct"}},
				{Point: "/sys/fs/cgroup/memory", Root: ctr, Controllers: []string{"memory"}},
				{Point: "/sys/fs/cgroup/pids", Root: ctr, Controllers: []string{"pids"}},
			},
			places: map[string]string{"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuset": ""},
		},
		{
			file:    "escapes.mountinfo",
			version: Hybrid,
			mounts: []Mount{
				{Point: `/mnt/my cgroups/cpu\x`, Root: "/", Controllers: []string{"cpu"}},
				{Point: "/mnt/v2 tree", Root: "/a\tb", V2: true},
			},
			places:  map[string]string{"cpu": `/mnt/my cgroups/cpu\x`},
			unified: "/mnt/v2 tree",
		},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			tab, err := Parse(readFixture(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tab.Mounts, tc.mounts) {
				t.Errorf("mounts:\n got %+v\nwant %+v", tab.Mounts, tc.mounts)
			}
			if v := tab.Version(); v != tc.version {
				t.Errorf("Version() = %q, want %q", v, tc.version)
			}
			for c, want := range tc.places {
				m, ok := tab.Controller(c)
				if ok != (want != "") || m.Point != want {
					t.Errorf("Controller(%q) = %q, %v; want %q", c, m.Point, ok, want)
				}
			}
			u, ok := tab.Unified()
			if ok != (tc.unified != "") || u.Point != tc.unified {
				t.Errorf("Unified() = %q, %v; want %q", u.Point, ok, tc.unified)
			}
			if got := len(tab.Points()); got != len(tc.mounts) {
				t.Errorf("Points() has %d entries, want %d", got, len(tc.mounts))
			}
		})
	}
}

func TestParseLive(t *testing.T) {
	// Whatever this machine is, its own mountinfo must parse.
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skip("no /proc/self/mountinfo:", err)
	}
	tab, err := Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if tab.Version() == "" {
		t.Errorf("no cgroup hierarchy found in this machine's mountinfo:\n%s", b)
	}
}

func TestParseNoCgroup(t *testing.T) {
	tab, err := Parse("22 27 0:21 / /proc rw,relatime - proc proc rw\n\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Mounts) != 0 || tab.Version() != "" {
		t.Errorf("got %+v, version %q; want nothing", tab.Mounts, tab.Version())
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, text string
		line       int
		why        string
	}{
		{"no separator", "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime cgroup cgroup rw,cpu", 1, "no ' - ' separator"},
		{"short prefix", "32 31 0:29 / - cgroup cgroup rw,cpu", 1, "fewer than 6 fields"},
		{"no fstype", "22 27 0:21 / /proc rw,relatime - ", 1, "no filesystem type"},
		{"v1 without options", "22 27 0:21 / /proc rw,relatime - proc proc rw\n32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup", 2, "without super options"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := Parse(tc.text)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse = %+v, %v; want a *ParseError", tab, err)
			}
			if pe.Line != tc.line || !strings.Contains(pe.Why, tc.why) {
				t.Errorf("error %q: line %d, why %q; want line %d, why containing %q", err, pe.Line, pe.Why, tc.line, tc.why)
			}
			if !strings.Contains(err.Error(), "mountinfo line") {
				t.Errorf("error %q does not say where", err)
			}
		})
	}
}

func TestUnescape(t *testing.T) {
	tests := []struct{ in, want string }{
		{`plain`, `plain`},
		{`a\040b`, `a b`},
		{`\134`, `\`},
		{`end\012`, "end\n"},
		{`\04`, `\04`},     // too short: kept
		{`\0a9`, `\0a9`},   // not octal: kept
		{`\400`, `\400`},   // above 0377 is no escape the kernel writes
		{`x\`, `x\`},       // trailing backslash
		{`\040\040`, `  `}, // two in a row
		{`\\040`, `\ `},    // a backslash, then an escape
	}
	for _, tc := range tests {
		if got := unescape(tc.in); got != tc.want {
			t.Errorf("unescape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"hybrid-this-machine.mountinfo", "v2-ubuntu.mountinfo", "v1-al2-eks.mountinfo", "v1-container.mountinfo", "escapes.mountinfo"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("1 2 3 4 5 6 - cgroup x\n")
	f.Add(" - ")
	f.Fuzz(func(t *testing.T, text string) {
		tab, err := Parse(text)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) && !strings.HasPrefix(err.Error(), "mountinfo: ") {
				t.Fatalf("error %v is neither a *ParseError nor a wrapped read error", err)
			}
			return
		}
		for _, m := range tab.Mounts {
			if m.V2 && len(m.Controllers) > 0 {
				t.Fatalf("cgroup2 mount with v1 controllers: %+v", m)
			}
		}
		_ = tab.Version()
	})
}
