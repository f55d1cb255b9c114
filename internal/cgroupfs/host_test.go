package cgroupfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// newRoot builds a small host tree in a temporary directory and opens it as
// the host root.
func newRoot(t *testing.T) (*Host, string) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"sys/fs/cgroup/cpu/b", "sys/fs/cgroup/cpu/a", "proc/42", "proc/1", "secret"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, v string) {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sys/fs/cgroup/cpu/cpu.shares", "1024\n")
	write("sys/fs/cgroup/cpu/a/cpu.shares", "2\n")
	write("proc/42/mountinfo", "m\n")
	write("proc/1/mountinfo", "host mounts\n")
	write("secret/key", "do not read")
	if err := os.Symlink("../../../../secret/key", filepath.Join(dir, "sys/fs/cgroup/cpu/a/evil")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../secret", filepath.Join(dir, "sys/fs/cgroup/cpu/linkdir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("42", filepath.Join(dir, "proc/self")); err != nil {
		t.Fatal(err)
	}
	h, err := OpenHost(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, dir
}

func TestHostReads(t *testing.T) {
	h, _ := newRoot(t)
	b, err := h.ReadFile("/sys/fs/cgroup/cpu/a/cpu.shares")
	if err != nil || string(b) != "2\n" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	dirs, err := h.ReadDirs("/sys/fs/cgroup/cpu")
	if err != nil {
		t.Fatal(err)
	}
	// Files and symlinks to directories are not cgroups.
	if !slices.Equal(dirs, []string{"a", "b"}) {
		t.Fatalf("ReadDirs = %v, want [a b]", dirs)
	}
	if _, err := h.ReadFile("/sys/fs/cgroup/cpu/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v, want ErrNotExist", err)
	}
	// /proc/self is an ordinary symlink and may be followed under /proc.
	if b, err := h.ReadFile("/proc/self/mountinfo"); err != nil || string(b) != "host mounts\n" {
		t.Fatalf("/proc/self/mountinfo under a host root = %q, %v; want pid 1's", b, err)
	}
	if b, err := h.ReadFile("/proc/self/../42/mountinfo"); err == nil {
		t.Fatalf("read through .. succeeded: %q", b)
	}
}

func TestHostRefusesEscapes(t *testing.T) {
	h, _ := newRoot(t)
	for _, p := range []string{
		"/sys/fs/cgroup/cpu/a/evil",      // symlink to a file outside the hierarchy
		"/sys/fs/cgroup/cpu/linkdir/key", // symlinked directory
		"/sys/fs/cgroup/cpu/../../../secret/key",
		"sys/fs/cgroup/cpu/cpu.shares", // relative
	} {
		if b, err := h.ReadFile(p); err == nil {
			t.Errorf("ReadFile(%q) = %q, want an error", p, b)
		} else {
			var pe *fs.PathError
			if !errors.As(err, &pe) || pe.Path != p {
				t.Errorf("ReadFile(%q): error %v does not carry the path", p, err)
			}
		}
	}
}

func TestHostWritePolicy(t *testing.T) {
	h, dir := newRoot(t)
	// Nothing is writable until allowed.
	if err := h.WriteFile("/sys/fs/cgroup/cpu/a/cpu.shares", []byte("4")); !errors.Is(err, ErrNotWritable) {
		t.Fatalf("write before AllowWrites: %v, want ErrNotWritable", err)
	}
	h.AllowWrites("/sys/fs/cgroup/cpu/a")
	if err := h.WriteFile("/sys/fs/cgroup/cpu/a/cpu.shares", []byte("4")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sys/fs/cgroup/cpu/a/cpu.shares")); string(b) != "4" {
		t.Fatalf("file holds %q after write", b)
	}
	for _, p := range []string{"/sys/fs/cgroup/cpu/cpu.shares", "/sys/fs/cgroup/cpu/a", "/sys/fs/cgroup/cpu/ab/x", "/secret/key"} {
		if err := h.WriteFile(p, []byte("1")); !errors.Is(err, ErrNotWritable) {
			t.Errorf("WriteFile(%q): %v, want ErrNotWritable", p, err)
		}
	}
	// A symlink inside an allowed cgroup is not followed for writes either.
	if err := h.WriteFile("/sys/fs/cgroup/cpu/a/evil", []byte("x")); err == nil {
		t.Fatal("write through a symlink succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "secret/key")); string(b) != "do not read" {
		t.Fatalf("secret changed: %q", b)
	}
	if err := h.Mkdir("/sys/fs/cgroup/cpu/a/child"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "sys/fs/cgroup/cpu/a/child")); err != nil || !fi.IsDir() {
		t.Fatalf("Mkdir did not create the directory: %v", err)
	}
	if err := h.Rmdir("/sys/fs/cgroup/cpu/a/child"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sys/fs/cgroup/cpu/a/child")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Rmdir left the directory: %v", err)
	}
	if err := h.Mkdir("/sys/fs/cgroup/cpu/b/child"); !errors.Is(err, ErrNotWritable) {
		t.Fatalf("Mkdir outside allowed: %v", err)
	}
	r, _, w := h.Counts()
	if r != 0 || w < 3 {
		t.Fatalf("counts: reads %d writes %d", r, w)
	}
}

func TestWithin(t *testing.T) {
	for _, c := range []struct {
		p, dir string
		want   bool
	}{
		{"/a/b", "/a", true}, {"/a", "/a", true}, {"/ab", "/a", false}, {"/x", "/", true},
	} {
		if got := Within(c.p, c.dir); got != c.want {
			t.Errorf("Within(%q, %q) = %v", c.p, c.dir, got)
		}
	}
}

// TestOpenNoFollow checks the path walk used on kernels without openat2:
// no component may be a symlink, and the file itself is opened as asked.
func TestOpenNoFollow(t *testing.T) {
	h, _ := newRoot(t)
	for _, c := range []struct {
		rel string
		ok  bool
	}{
		{"sys/fs/cgroup/cpu/a/cpu.shares", true},
		{"sys/fs/cgroup/cpu/linkdir/key", false}, // symlinked directory in the middle
		{"sys/fs/cgroup/cpu/a/evil", false},      // symlink as the last component
		{"sys/fs/cgroup/cpu/a/missing", false},
	} {
		fd, err := openNoFollow(h.rootFD, c.rel, unix.O_RDONLY)
		if err == nil {
			unix.Close(fd)
		}
		if (err == nil) != c.ok {
			t.Errorf("openNoFollow(%q) = %v, want ok=%v", c.rel, err, c.ok)
		}
	}
}

// A Grant writes within its own scope only, adds nothing to the Host (a
// second grant, or the Host's own writes, see none of it) and refuses
// everything once ended; two grants used from two goroutines share no
// state (run with -race).
func TestGrantIsScopedToOneApply(t *testing.T) {
	h, dir := newRoot(t)
	g := h.Grant([]string{"/sys/fs/cgroup/cpu/a"}, []string{"/sys/fs/cgroup/cpu/cpu.shares"})
	other := h.Grant(nil, nil)
	done := make(chan error, 1)
	go func() { done <- other.WriteFile("/sys/fs/cgroup/cpu/a/cpu.shares", []byte("9")) }()
	if err := g.WriteFile("/sys/fs/cgroup/cpu/a/cpu.shares", []byte("4")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrNotWritable) {
		t.Errorf("a grant of nothing wrote beneath another grant's tree: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sys/fs/cgroup/cpu/a/cpu.shares")); string(b) != "4" {
		t.Fatalf("file holds %q after the grant's write", b)
	}
	if err := g.WriteFile("/sys/fs/cgroup/cpu/cpu.shares", []byte("5")); err != nil {
		t.Errorf("exact path of the grant: %v", err)
	}
	for _, p := range []string{"/sys/fs/cgroup/cpu/a", "/sys/fs/cgroup/cpu/ab/x", "/secret/key"} {
		if err := g.WriteFile(p, []byte("1")); !errors.Is(err, ErrNotWritable) {
			t.Errorf("grant WriteFile(%q): %v, want ErrNotWritable", p, err)
		}
	}
	if err := h.WriteFile("/sys/fs/cgroup/cpu/a/cpu.shares", []byte("6")); !errors.Is(err, ErrNotWritable) {
		t.Errorf("the Host's own write after a grant: %v, want ErrNotWritable (a grant adds nothing to the Host)", err)
	}
	g.End()
	if err := g.WriteFile("/sys/fs/cgroup/cpu/a/cpu.shares", []byte("7")); !errors.Is(err, ErrNotWritable) {
		t.Errorf("write after End: %v, want ErrNotWritable", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sys/fs/cgroup/cpu/a/cpu.shares")); string(b) != "4" {
		t.Fatalf("file holds %q: a refused write went through", b)
	}
}
