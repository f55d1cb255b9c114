package cgroupfs_test

import (
	"path"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// TestHubFansOutByPath checks, on the live kernel, that subscribers of
// one Hub share one inotify instance and one watch per path, and that each
// gets only the events its own mask asked for: the steady scan's
// directory watches and the weight holder's file watches, as the agent
// runs them.
func TestHubFansOutByPath(t *testing.T) {
	s := realtest.NewScratch(t)
	s.Mkdir("pod")
	file, value := "cpu.shares", "2048"
	if s.V2() {
		file, value = "cpu.weight", "200"
	}
	before := s.Host.Usage().Watchers
	hub, err := s.Host.NewHub()
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	dirs, files := hub.Subscribe(), hub.Subscribe()
	defer dirs.Close()
	defer files.Close()
	dir := path.Dir(s.Path("pod", file))
	weight := s.Path("pod", file)
	if err := dirs.Add(dir, cgroupfs.EventCreate|cgroupfs.EventDelete|cgroupfs.EventModify); err != nil {
		t.Fatal(err)
	}
	if err := files.Add(weight, cgroupfs.EventModify); err != nil {
		t.Fatal(err)
	}
	if err := files.Add(dir, cgroupfs.EventCreate); err != nil {
		t.Fatal(err)
	}
	if got := hub.Len(); got != 2 {
		t.Errorf("hub holds %d watches for 2 paths", got)
	}
	if got := s.Host.Usage().Watchers - before; got != 1 {
		t.Errorf("%d inotify instances opened for one hub", got)
	}

	s.Write("pod", file, value)
	s.Mkdir("pod/c1")
	// wait takes sub's events until one matches, or fails after 2 s.
	wait := func(name string, sub *cgroupfs.Sub, ok func(cgroupfs.WatchEvent) bool) []cgroupfs.WatchEvent {
		t.Helper()
		var all []cgroupfs.WatchEvent
		deadline := time.After(2 * time.Second)
		for {
			evs, err := sub.Poll()
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, evs...)
			for _, e := range evs {
				if ok(e) {
					return all
				}
			}
			select {
			case <-sub.Ready():
			case <-deadline:
				t.Fatalf("%s: no matching event in %v", name, all)
			}
		}
	}
	created := func(e cgroupfs.WatchEvent) bool {
		return e.Path == dir && e.Name == "c1" && e.Mask&cgroupfs.EventCreate != 0
	}
	got := wait("files", files, created)
	sawModify := false
	for _, e := range got {
		if e.Path == dir && e.Mask&cgroupfs.EventModify != 0 {
			t.Errorf("files got %v on %s: its mask there is IN_CREATE only", e, dir)
		}
		if e.Path == weight && e.Mask&cgroupfs.EventModify != 0 {
			sawModify = true
		}
	}
	if !sawModify {
		t.Error("files: no IN_MODIFY on the weight it watches")
	}
	for _, e := range wait("dirs", dirs, created) {
		if e.Path == weight {
			t.Errorf("dirs got %v on %s, which it does not watch", e, weight)
		}
	}

	// The directory's watch stays while one subscriber keeps it.
	dirs.Remove(dir)
	if got := hub.Len(); got != 2 {
		t.Errorf("after one of two subscribers left %s: %d watches, want 2", dir, got)
	}
	s.Mkdir("pod/c2")
	wait("files after dirs left", files, func(e cgroupfs.WatchEvent) bool { return e.Name == "c2" })
	files.Close()
	if got := hub.Len(); got != 0 {
		t.Errorf("after every subscriber left: %d watches", got)
	}
}
