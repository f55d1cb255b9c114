package inventory

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// unlistable refuses to list one directory, as a permission or a resolve
// restriction can; its files stay readable.
type unlistable struct {
	cgroupfs.FS
	dir string
}

func (u unlistable) ReadDirs(p string) ([]string, error) {
	if p == u.dir {
		return nil, &fs.PathError{Op: "open", Path: p, Err: syscall.EACCES}
	}
	return u.FS.ReadDirs(p)
}

// A cgroup whose children cannot be listed is not gone: its own figures
// are read, it keeps its weight among its siblings, and the error is
// reported. Treating it as vanished made its guaranteed CPU 0 and its
// weight drop out of its siblings' sum — unknown shown as zero.
func TestUnlistableCgroupIsNotGone(t *testing.T) {
	var b strings.Builder
	b.WriteString("cgwarden snapshot v1\n-- /proc/self/mountinfo --\n32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n")
	b.WriteString("-- /sys/devices/system/cpu/online --\n0-1\n")
	for _, c := range []struct{ dir, shares string }{{"a", "1024"}, {"b", "1024"}, {"b/c", "512"}} {
		b.WriteString("-- /sys/fs/cgroup/cpu/" + c.dir + "/cpu.shares --\n" + c.shares + "\n")
	}
	s, err := snapshot.Load(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Open(unlistable{s.Samples[0].FS, "/sys/fs/cgroup/cpu/b"})
	if err != nil {
		t.Fatal(err)
	}
	n, err := sc.Scan(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	bc := n.Find("/b")
	if bc == nil {
		t.Fatal("no /b")
	}
	if bc.Stats.Gone || bc.Stats.CPU.Weight == nil || *bc.Stats.CPU.Weight != 1024 {
		t.Errorf("/b: gone %v, weight %v; want present at 1024", bc.Stats.Gone, bc.Stats.CPU.Weight)
	}
	if bc.GuaranteedCores != 1 || n.Find("/a").GuaranteedCores != 1 {
		t.Errorf("guaranteed /a %v, /b %v; want 1 and 1", n.Find("/a").GuaranteedCores, bc.GuaranteedCores)
	}
	if !slicesContainsErr(n.Errors, syscall.EACCES) {
		t.Errorf("errors %v: the listing failure is not reported", n.Errors)
	}
}

func slicesContainsErr(errs []error, target error) bool {
	for _, e := range errs {
		if errors.Is(e, target) {
			return true
		}
	}
	return false
}
