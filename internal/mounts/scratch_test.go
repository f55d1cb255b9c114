package mounts

import (
	"reflect"
	"testing"
)

func TestScratch(t *testing.T) {
	parse := func(name string) Table {
		tbl, err := Parse(readFixture(t, name))
		if err != nil {
			t.Fatal(err)
		}
		return tbl
	}
	subtree := func(text string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			if p != "/sys/fs/cgroup/cgroup.subtree_control" {
				t.Errorf("read %s", p)
			}
			return []byte(text), nil
		}
	}

	// v1: cpu and cpuacct share a mount, listed once.
	v1 := parse("v1-al2-eks.mountinfo")
	points, v2, err := v1.Scratch(nil, "the test")
	if want := []string{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"}; err != nil || v2 || !reflect.DeepEqual(points, want) {
		t.Errorf("v1: %q %v %v, want %q", points, v2, err, want)
	}
	for file, want := range map[string]string{"cpu.shares": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct.usage": "/sys/fs/cgroup/cpu,cpuacct", "memory.limit_in_bytes": "/sys/fs/cgroup/memory", "pids.max": "/sys/fs/cgroup/pids", "cgroup.procs": "/sys/fs/cgroup/cpu,cpuacct"} {
		if got := v1.FileMount(file); got != want {
			t.Errorf("v1 FileMount(%s) = %s, want %s", file, got, want)
		}
	}

	u := parse("v2-ubuntu.mountinfo")
	points, v2, err = u.Scratch(subtree("cpuset cpu io memory pids\n"), "the test")
	if err != nil || !v2 || !reflect.DeepEqual(points, []string{"/sys/fs/cgroup"}) {
		t.Errorf("v2: %q %v %v", points, v2, err)
	}
	if got := u.FileMount("memory.max"); got != "/sys/fs/cgroup" {
		t.Errorf("v2 FileMount = %s", got)
	}
	_, _, err = u.Scratch(subtree("cpu memory\n"), "the demo")
	if want := "controller pids is not enabled in /sys/fs/cgroup/cgroup.subtree_control: the demo cannot weigh or measure its pods"; err == nil || err.Error() != want {
		t.Errorf("v2 without pids: %v, want %s", err, want)
	}

	if _, _, err := (Table{}).Scratch(nil, "the test"); err == nil || err.Error() != "no cgroup hierarchy is mounted" {
		t.Errorf("no mounts: %v", err)
	}
}
