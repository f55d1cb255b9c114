package cgroupfs

import (
	"fmt"
	"io/fs"
	"path"
	"sync"

	"golang.org/x/sys/unix"
)

// Kept reads files of a Host through descriptors it keeps open between
// reads: the first read of a path opens it through the Host's one door
// (beneath the root, no symlinks) and keeps the descriptor; later reads
// are one pread(2) from offset 0, which makes the kernel generate the
// file afresh (cgroup files are seq_files: a read at offset 0 restarts
// them). On this project's test machine a pread of a small cgroup file
// costs 1–2 µs against 8–10 µs for open+read+close, and 8.5 against 15 µs
// for memory.stat, whose generation dominates; a steady-state scan reads
// the same counters of the same cgroups every interval.
//
// Descriptors are bounded: past Max, files are read with open+read+close
// and not kept. A descriptor whose cgroup was removed reads ENODEV; it is
// closed, and the path is opened afresh once (a cgroup removed and made
// again under the same name is a new file), which gives fs.ErrNotExist
// when it is gone for good, as Host.ReadFile does.
//
// Written by hand because no library keeps descriptors to kernfs files
// with a bound and this recovery; os.File would add a finalizer and a
// poller registration per descriptor for nothing.
type Kept struct {
	h   *Host
	max int

	mu      sync.Mutex
	fds     map[keptKey]int
	unkept  uint64
	reopens uint64
}

// DefaultKeptMax bounds the descriptors a Kept holds when the caller
// gives no bound: 8 counter files per cgroup for 4,000 cgroups.
const DefaultKeptMax = 32 << 10

// NewKept returns a Kept over h holding at most max descriptors
// (DefaultKeptMax when max <= 0, and never more than half the process's
// descriptor limit). Close releases them.
func (h *Host) NewKept(max int) *Kept {
	if max <= 0 {
		max = DefaultKeptMax
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Cur/2 < uint64(max) {
		max = int(lim.Cur / 2)
	}
	k := &Kept{h: h, max: max, fds: map[keptKey]int{}}
	track(h, &h.kepts, k, true)
	return k
}

var (
	_ FS          = (*Kept)(nil)
	_ PartsReader = (*Kept)(nil)
)

// PartsReader reads a cgroup file named by its parts: the hierarchy's
// mount point, the cgroup's path inside it and the file's name. A scan
// reads thousands of files; naming them without joining a path saves an
// allocation each.
type PartsReader interface {
	ReadParts(mount, cgroup, name string) (string, error)
}

// keptKey names a kept file by its parts (ReadParts), or by its whole
// path in mount (ReadFile).
type keptKey struct{ mount, cgroup, name string }

// path is the host path of k.
func (k keptKey) path() string {
	if k.cgroup == "" && k.name == "" {
		return k.mount
	}
	return path.Join(k.mount, k.cgroup, k.name)
}

// dir is the host directory of k.
func (k keptKey) dir() string { return path.Dir(k.path()) }

// ReadFile reads the whole file at host path p (see Kept).
func (k *Kept) ReadFile(p string) ([]byte, error) {
	s, err := k.read(keptKey{mount: p})
	if err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// ReadParts reads the file name of cgroup in the hierarchy mounted at
// mount (see Kept).
func (k *Kept) ReadParts(mount, cgroup, name string) (string, error) {
	return k.read(keptKey{mount, cgroup, name})
}

func (k *Kept) read(key keptKey) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	fd, ok := k.fds[key]
	if ok {
		s, err := preadAll(fd)
		if err == nil {
			k.h.reads.Add(1)
			return s, nil
		}
		unix.Close(fd)
		delete(k.fds, key)
		if err != unix.ENODEV {
			k.h.reads.Add(1)
			k.h.readErrors.Add(1)
			return "", &fs.PathError{Op: "pread", Path: key.path(), Err: err}
		}
		k.reopens++ // the cgroup was removed: look at the path again
	}
	p := key.path()
	if len(k.fds) >= k.max {
		k.unkept++
		b, err := k.h.ReadFile(p)
		return string(b), err
	}
	k.h.reads.Add(1)
	fd, err := k.h.open(p, unix.O_RDONLY)
	if err != nil {
		k.h.readErrors.Add(1)
		return "", &fs.PathError{Op: "open", Path: p, Err: err}
	}
	s, err := preadAll(fd)
	if err != nil {
		unix.Close(fd)
		k.h.readErrors.Add(1)
		if err == unix.ENODEV {
			err = fs.ErrNotExist // removed between open and read
		}
		return "", &fs.PathError{Op: "read", Path: p, Err: err}
	}
	k.fds[key] = fd
	return s, nil
}

// ReadDirs lists directories through the Host: listings are not kept.
func (k *Kept) ReadDirs(p string) ([]string, error) { return k.h.ReadDirs(p) }

// Forget closes the descriptors of the files directly in the host
// directories dirs (cgroups that are gone, or will be looked at anew).
func (k *Kept) Forget(dirs ...string) {
	set := make(map[string]bool, len(dirs))
	for _, d := range dirs {
		set[path.Clean(d)] = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, fd := range k.fds {
		if set[key.dir()] {
			unix.Close(fd)
			delete(k.fds, key)
		}
	}
}

// KeptStats is what a Kept holds and has done.
type KeptStats struct {
	// Open is the number of descriptors held, Max its bound.
	Open, Max int
	// Unkept counts reads done with open+read+close because the bound
	// was reached; Reopens the descriptors found stale (their cgroup
	// removed) and opened afresh.
	Unkept, Reopens uint64
}

// Stats reports the descriptors held and the reads that could not use one.
func (k *Kept) Stats() KeptStats {
	k.mu.Lock()
	defer k.mu.Unlock()
	return KeptStats{Open: len(k.fds), Max: k.max, Unkept: k.unkept, Reopens: k.reopens}
}

// Close closes every descriptor held.
func (k *Kept) Close() error {
	track(k.h, &k.h.kepts, k, false)
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, fd := range k.fds {
		unix.Close(fd)
		delete(k.fds, key)
	}
	return nil
}

// preadAll reads a kept descriptor from offset 0 (see readPooled).
func preadAll(fd int) (string, error) {
	return readPooled(fd, true, func(b []byte) string { return string(b) })
}

// String describes the bound for logs.
func (s KeptStats) String() string {
	return fmt.Sprintf("%d of at most %d descriptors kept open (%d reads past the bound, %d reopened)", s.Open, s.Max, s.Unkept, s.Reopens)
}
