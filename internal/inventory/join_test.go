package inventory

import (
	"path"
	"testing"
)

// joinClean is an allocation-saving path.Join; it must never disagree
// with it.
func TestJoinCleanIsPathJoin(t *testing.T) {
	for _, c := range [][2]string{
		{"/sys/fs/cgroup/cpu", "/"}, {"/sys/fs/cgroup/cpu", "/kubepods"}, {"/", "/"}, {"/", "/a"}, {"/", "a"},
		{"/a", "b"}, {"/a", "b/c"}, {"/a/", "b"}, {"/a", ".."}, {"/a", "../b"}, {"/a", "b/../c"}, {"/a", ""},
		{"/a", "."}, {"", "b"}, {"a", "b"}, {"/a", "//b"}, {"/a", "b:c"}, {"/a//b", "c"}, {"/a", "..b"},
	} {
		if got, want := joinClean(c[0], c[1]), path.Join(c[0], c[1]); got != want {
			t.Errorf("joinClean(%q, %q) = %q, path.Join gives %q", c[0], c[1], got, want)
		}
	}
}

func FuzzJoinClean(f *testing.F) {
	f.Add("/sys/fs/cgroup/cpu", "/kubepods.slice")
	f.Add("/", "..")
	f.Add("/a", "b/../../c")
	f.Fuzz(func(t *testing.T, dir, rel string) {
		if got, want := joinClean(dir, rel), path.Join(dir, rel); got != want {
			t.Fatalf("joinClean(%q, %q) = %q, path.Join gives %q", dir, rel, got, want)
		}
	})
}
