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

func TestScratchName(t *testing.T) {
	name := ScratchName("cgwarden-demo-", 4242, [4]byte{0x01, 0x23, 0xab, 0xcd})
	if name != "cgwarden-demo-4242-0123abcd" {
		t.Errorf("ScratchName = %q", name)
	}
	if pid, ok := ScratchMaker(name, "cgwarden-demo-"); !ok || pid != 4242 {
		t.Errorf("ScratchMaker(%q) = %d, %v; want 4242", name, pid, ok)
	}
	for _, n := range []string{
		"cgwarden-demo-0123abcd",        // the form before PIDs
		"cgwarden-test-4242-0123abcd",   // another prefix
		"cgwarden-demo-4242-0123abc",    // 7 hex digits
		"cgwarden-demo-4242-0123ABCD",   // upper case
		"cgwarden-demo-04242-0123abcd",  // not as a PID is written
		"cgwarden-demo-0-0123abcd",      // no process
		"cgwarden-demo--1-0123abcd",     // negative
		"cgwarden-demo-4242-0123abcd-x", // more after it
		"cgwarden-demo-99999999999999999999-0123abcd",
	} {
		if pid, ok := ScratchMaker(n, "cgwarden-demo-"); ok {
			t.Errorf("ScratchMaker(%q) = %d, want no PID", n, pid)
		}
	}
}
