package cgroupfs_test

import (
	"errors"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// TestWatchCgroupEvents checks, on the live kernel (v1 here, v2 in the
// QEMU lane), the events the weight holder relies on: a write(2) to a
// cgroup weight file raises IN_MODIFY on it, mkdir and rmdir of a child
// raise IN_CREATE and IN_DELETE on the parent. (IN_IGNORED for a removed
// cgroup comes only when the kernel frees its inode, which v1 does not do
// at once: the holder learns of removals from the parent's IN_DELETE.)
func TestWatchCgroupEvents(t *testing.T) {
	s := realtest.NewScratch(t)
	s.Mkdir("pod")
	file := "cpu.shares"
	value := "2048"
	if s.V2() {
		file, value = "cpu.weight", "200"
	}
	w, err := s.Host.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	weight := s.Path("pod", file)
	dir := path.Dir(s.Path("pod", file))
	if err := w.Add(weight, cgroupfs.EventModify); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(dir, cgroupfs.EventCreate|cgroupfs.EventDelete); err != nil {
		t.Fatal(err)
	}
	events := make(chan cgroupfs.WatchEvent, 64)
	go func() {
		for {
			evs, err := w.Read()
			if err != nil {
				close(events)
				return
			}
			for _, e := range evs {
				events <- e
			}
		}
	}()
	expect := func(what string, ok func(cgroupfs.WatchEvent) bool) {
		t.Helper()
		deadline := time.After(2 * time.Second)
		for {
			select {
			case e, open := <-events:
				if !open {
					t.Fatalf("%s: the watcher stopped", what)
				}
				if ok(e) {
					return
				}
			case <-deadline:
				t.Fatalf("%s: no event within 2 s", what)
			}
		}
	}
	s.Write("pod", file, value)
	expect("IN_MODIFY on a write", func(e cgroupfs.WatchEvent) bool { return e.Path == weight && e.Mask&cgroupfs.EventModify != 0 })
	s.Mkdir("pod/ctr")
	expect("IN_CREATE on mkdir", func(e cgroupfs.WatchEvent) bool {
		return e.Path == dir && e.Name == "ctr" && e.Mask&cgroupfs.EventCreate != 0
	})
	for _, p := range s.Points {
		if err := s.Host.Rmdir(path.Join(p, s.Name, "pod/ctr")); err != nil {
			t.Fatal(err)
		}
	}
	expect("IN_DELETE on rmdir", func(e cgroupfs.WatchEvent) bool {
		return e.Path == dir && e.Name == "ctr" && e.Mask&cgroupfs.EventDelete != 0
	})
	// Close wakes a waiting Read.
	w.Close()
	select {
	case _, open := <-events:
		for open {
			_, open = <-events
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not wake Read")
	}
}

// TestWatchRefusesSymlinks: a watch goes through the door, so a symlink
// on the way is refused like a read would be.
func TestWatchRefusesSymlinks(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/etc", path.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	h, err := cgroupfs.OpenHost(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	w, err := h.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.Add("/link/hostname", cgroupfs.EventModify)
	if err == nil || !strings.Contains(err.Error(), "watch") {
		t.Fatalf("watching through a symlink: %v, want a refusal", err)
	}
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("watching through a symlink: %v, want a refusal, not not-found", err)
	}
}
