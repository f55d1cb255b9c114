package cgroupfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// AllowExact opens one file or one directory to writes and nothing beside
// or beneath it (revert writes PIDs back into a source's cgroup.procs and
// recreates a removed source, outside the subtrees apply may write).
func TestAllowExact(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"src", "other"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, d, "cgroup.procs"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h, err := OpenHost(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.AllowExact("/src/cgroup.procs", "/gone")
	if err := h.WriteFile("/src/cgroup.procs", []byte("1")); err != nil {
		t.Errorf("exact file: %v", err)
	}
	if err := h.Mkdir("/gone"); err != nil {
		t.Errorf("exact directory: %v", err)
	}
	for name, err := range map[string]error{
		"sibling file":      h.WriteFile("/other/cgroup.procs", []byte("1")),
		"beneath exact dir": h.Mkdir("/gone/child"),
		"parent of exact":   h.Rmdir("/src"),
	} {
		if !errors.Is(err, ErrNotWritable) {
			t.Errorf("%s: %v, want ErrNotWritable", name, err)
		}
	}
}
