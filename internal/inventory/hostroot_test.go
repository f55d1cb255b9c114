package inventory

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
)

// TestHostRootNamesTheMissingMount: under --host-root, each piece of the
// host cgwarden reads that is not mounted is named in the error with the
// mount that provides it.
func TestHostRootNamesTheMissingMount(t *testing.T) {
	root := t.TempDir()
	open := func() error {
		h, err := cgroupfs.OpenHost(root)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		_, err = Open(h)
		return err
	}
	write := func(p, content string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := func(err error, mount string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "the host's "+mount+" must be mounted at "+filepath.Join(root, mount)) {
			t.Fatalf("error %v does not name the mount of %s", err, mount)
		}
	}
	want(open(), "/proc")
	// Under a host root /proc/self is read as /proc/1 (the host's init).
	write("proc/1/mountinfo", "30 1 0:26 / /sys/fs/cgroup/cpu rw,nosuid shared:9 - cgroup cgroup rw,cpu\n"+
		"31 1 0:27 / /sys/fs/cgroup/cpuacct rw,nosuid shared:10 - cgroup cgroup rw,cpuacct\n")
	want(open(), "/sys/devices/system/cpu")
	write("sys/devices/system/cpu/online", "0-1\n")
	want(open(), "/sys/fs/cgroup")
	for _, d := range []string{"sys/fs/cgroup/cpu", "sys/fs/cgroup/cpuacct"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := open(); err != nil {
		t.Fatalf("with every mount in place: %v", err)
	}
}
