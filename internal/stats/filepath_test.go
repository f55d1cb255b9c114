package stats

import (
	"path"
	"testing"
)

// filePath is an allocation-saving path.Join; it must never disagree
// with it.
func TestFilePathIsPathJoin(t *testing.T) {
	for _, c := range [][3]string{
		{"/sys/fs/cgroup/cpu", "/", "cpu.shares"}, {"/sys/fs/cgroup/cpu", "/kubepods", "cpu.stat"},
		{"/", "/a", "b"}, {"/m/", "/a", "b"}, {"/m", "a", "b"}, {"/m", "/a/", "b"}, {"/m", "/a", "../b"},
		{"/m", "/a", ".."}, {"/m", "/a", ""}, {"/m", "/../a", "b"}, {"", "/a", "b"}, {"/m", "/a", "b/c"},
	} {
		if got, want := filePath(c[0], c[1], c[2]), path.Join(c[0], c[1], c[2]); got != want {
			t.Errorf("filePath(%q, %q, %q) = %q, path.Join gives %q", c[0], c[1], c[2], got, want)
		}
	}
}

func FuzzFilePath(f *testing.F) {
	f.Add("/sys/fs/cgroup/memory", "/kubepods/burstable", "memory.stat")
	f.Add("/m", "/", "..")
	f.Fuzz(func(t *testing.T, mount, cgroup, name string) {
		if got, want := filePath(mount, cgroup, name), path.Join(mount, cgroup, name); got != want {
			t.Fatalf("filePath(%q, %q, %q) = %q, path.Join gives %q", mount, cgroup, name, got, want)
		}
	})
}
