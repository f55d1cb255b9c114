package cgroupfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Host is the live filesystem of a node beneath a root directory ("/" on the
// node itself, or e.g. "/host" in a container that mounts the host there).
type Host struct {
	root   string
	rootFD int
	// writable lists the host paths beneath which writes are allowed.
	writable []string
	// exact lists single paths (a file, or a directory to create or
	// remove) that may be written although nothing around them may.
	exact []string
	// noOpenat2 is set once openat2 returned ENOSYS (kernels before 5.6).
	noOpenat2 atomic.Bool

	reads, readErrors, writes atomic.Uint64

	// live are the descriptor caches (Kept) and inotify instances
	// (Watcher) open on this Host, for Usage.
	liveMu   sync.Mutex
	kepts    map[*Kept]struct{}
	watchers map[*Watcher]struct{}
}

// Usage is what is open on a Host right now: each steady scanner keeps
// one descriptor cache, each watcher one inotify instance.
type Usage struct {
	// Caches is the number of descriptor caches (Kept) open, one per
	// steady scanner; Descriptors the descriptors they hold.
	Caches, Descriptors int
	// Watchers is the number of inotify instances open; Watches the
	// watches they hold.
	Watchers, Watches int
}

// Usage counts the caches and watchers open on h; any goroutine may call
// it.
func (h *Host) Usage() Usage {
	h.liveMu.Lock()
	kepts, watchers := slices.Collect(maps.Keys(h.kepts)), slices.Collect(maps.Keys(h.watchers))
	h.liveMu.Unlock()
	u := Usage{Caches: len(kepts), Watchers: len(watchers)}
	for _, k := range kepts {
		u.Descriptors += k.Stats().Open
	}
	for _, w := range watchers {
		u.Watches += w.Len()
	}
	return u
}

// track notes a cache or watcher opened (on) or closed (off).
func track[T comparable](h *Host, m *map[T]struct{}, v T, on bool) {
	h.liveMu.Lock()
	defer h.liveMu.Unlock()
	if !on {
		delete(*m, v)
		return
	}
	if *m == nil {
		*m = map[T]struct{}{}
	}
	(*m)[v] = struct{}{}
}

var (
	_ FS     = (*Host)(nil)
	_ Writer = (*Host)(nil)
)

// OpenHost opens the host root. Close releases it.
func OpenHost(root string) (*Host, error) {
	if root == "" {
		root = "/"
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open host root", Path: root, Err: err}
	}
	return &Host{root: root, rootFD: fd}, nil
}

// Close releases the root directory.
func (h *Host) Close() error { return unix.Close(h.rootFD) }

// Root is the host root this Host resolves beneath.
func (h *Host) Root() string { return h.root }

// AllowWrites declares the host paths (cgroup mount points, or narrower
// cgroups) beneath which the Host's own WriteFile, Mkdir and Rmdir may
// act. It is for a one-shot setup before any goroutine writes (a test's
// scratch hierarchy, the demo); appliers take a Grant per plan instead.
func (h *Host) AllowWrites(paths ...string) { h.writable = appendClean(h.writable, paths) }

// AllowExact declares single host paths that may be written: one file
// (e.g. the cgroup.procs of a cgroup that processes are moved back into),
// or one directory that may be created or removed, and nothing beneath or
// beside them.
func (h *Host) AllowExact(paths ...string) { h.exact = appendClean(h.exact, paths) }

// appendClean appends the cleaned paths to dst.
func appendClean(dst, paths []string) []string {
	for _, p := range paths {
		dst = append(dst, path.Clean(p))
	}
	return dst
}

// Counts reports how many reads, failed reads and writes went through h.
func (h *Host) Counts() (reads, readErrors, writes uint64) {
	return h.reads.Load(), h.readErrors.Load(), h.writes.Load()
}

// ReadFile reads a whole file.
func (h *Host) ReadFile(p string) ([]byte, error) {
	h.reads.Add(1)
	fd, err := h.open(p, unix.O_RDONLY)
	if err != nil {
		h.readErrors.Add(1)
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	b, err := readPooled(fd, false, func(b []byte) []byte { return append([]byte{}, b...) })
	if err != nil {
		h.readErrors.Add(1)
		return nil, &fs.PathError{Op: "read", Path: p, Err: err}
	}
	return b, nil
}

// readPooled reads fd to its end into a pooled buffer that grows, and
// returns conv of exactly what was read. cgroup files report a size of
// 4096 or 0 whatever they hold, so the size cannot be asked first; a scan
// reads thousands of files, and one allocation each (conv's) keeps the
// garbage collector out of its way. With pread, fd is read from offset 0
// (a kept descriptor, see Kept), and a read shorter than the space
// offered is the whole file: every cgroup file is a seq_file, which fills
// the caller's buffer until its records end, so the read that would only
// return EOF (a second syscall per file) is not made.
func readPooled[T any](fd int, pread bool, conv func([]byte) T) (T, error) {
	bp := readBufs.Get().(*[]byte)
	defer putReadBuf(bp)
	buf := (*bp)[:0]
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
			*bp = buf
		}
		var n int
		var err error
		if pread {
			n, err = unix.Pread(fd, buf[len(buf):cap(buf)], int64(len(buf)))
		} else {
			n, err = unix.Read(fd, buf[len(buf):cap(buf)])
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			var zero T
			return zero, err
		}
		short := pread && n < cap(buf)-len(buf)
		buf = buf[:len(buf)+n]
		if n == 0 || short {
			return conv(buf), nil
		}
	}
}

// readBufs holds the buffers ReadFile and ReadDirs read into.
var readBufs = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// putReadBuf returns a buffer to the pool unless a huge file grew it.
func putReadBuf(bp *[]byte) {
	if cap(*bp) <= 1<<20 {
		readBufs.Put(bp)
	}
}

// ReadDirs lists the subdirectories of a directory, sorted.
func (h *Host) ReadDirs(p string) ([]string, error) {
	h.reads.Add(1)
	fd, err := h.open(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		h.readErrors.Add(1)
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	out, err := subdirs(fd)
	if err != nil {
		h.readErrors.Add(1)
		return nil, &fs.PathError{Op: "readdir", Path: p, Err: err}
	}
	slices.Sort(out)
	return out, nil
}

// OpenDir opens the directory p beneath the root, as ReadDirs does, and
// hands its descriptor to the caller: for a flock that must be taken on
// the node's own directory (one inode for every process that opens it, in
// any container and through any mount of the hierarchy), which a path
// could not name safely. The caller closes it.
func (h *Host) OpenDir(p string) (*os.File, error) {
	fd, err := h.open(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// subdirs lists the directories in the open directory fd with getdents64
// into a pooled buffer, allocating only the names it returns: a cgroup
// directory holds dozens of files and a scan lists every cgroup. An entry
// whose type the filesystem does not report is looked up with fstatat
// (without following it), as os.ReadDir does.
func subdirs(fd int) ([]string, error) {
	bp := readBufs.Get().(*[]byte)
	defer putReadBuf(bp)
	buf := (*bp)[:cap(*bp)]
	var out []string
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return out, nil
		}
		// struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen;
		// u8 d_type; char d_name[]; }, d_name NUL-terminated and padded.
		for off := 0; off < n; {
			if off+19 > n {
				return nil, errors.New("truncated directory entry")
			}
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 20 || off+reclen > n {
				return nil, errors.New("malformed directory entry")
			}
			typ, name := buf[off+18], buf[off+19:off+reclen]
			off += reclen
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if string(name) == "." || string(name) == ".." {
				continue
			}
			switch typ {
			case unix.DT_DIR:
				out = append(out, string(name))
			case unix.DT_UNKNOWN:
				var st unix.Stat_t
				err := unix.Fstatat(fd, string(name), &st, unix.AT_SYMLINK_NOFOLLOW)
				if err == unix.ENOENT {
					continue // removed since it was listed
				}
				if err != nil {
					return nil, err
				}
				if st.Mode&unix.S_IFMT == unix.S_IFDIR {
					out = append(out, string(name))
				}
			}
		}
	}
}

// WriteFile writes data to an existing file in one write(2), as the cgroup
// filesystem expects; a short write is an error.
func (h *Host) WriteFile(p string, data []byte) error { return h.own().WriteFile(p, data) }

// Mkdir creates one directory (a cgroup) whose parent exists.
func (h *Host) Mkdir(p string) error { return h.own().Mkdir(p) }

// Rmdir removes one empty directory (a cgroup without processes or
// children).
func (h *Host) Rmdir(p string) error { return h.own().Rmdir(p) }

// own is the Host's own writer: a grant, never ended, of what AllowWrites
// and AllowExact declared so far.
func (h *Host) own() *Grant { return &Grant{h: h, trees: h.writable, exact: h.exact} }

// ErrNotWritable is returned for a write outside the allowed paths.
var ErrNotWritable = errors.New("outside the paths cgwarden may write")

// Grant is a writer bound to one checked plan: it writes beneath the
// plan's trees and to its exact paths only, and only until End. Nothing
// is added to the Host: two grants held by two goroutines are two
// writers, each with its own scope, and a grant ended leaves nothing
// behind (unlike AllowWrites, whose list only grows).
type Grant struct {
	h            *Host
	trees, exact []string
	ended        atomic.Bool
}

var _ Writer = (*Grant)(nil)

// Grant returns a writer for the cgroups beneath trees (not the trees
// themselves) and for the exact paths (one file, or one directory to make
// or remove), valid until its End.
func (h *Host) Grant(trees, exact []string) *Grant {
	return &Grant{h: h, trees: appendClean(nil, trees), exact: appendClean(nil, exact)}
}

// End revokes the grant: every later write is refused.
func (g *Grant) End() { g.ended.Store(true) }

// may reports whether p is one of the exact paths or lies strictly
// beneath one of the trees, while the grant lasts.
func (g *Grant) may(p string) error {
	if g.ended.Load() {
		return &fs.PathError{Op: "write", Path: p, Err: fmt.Errorf("%w: the grant of its apply has ended", ErrNotWritable)}
	}
	c := path.Clean(p)
	if slices.Contains(g.exact, c) || slices.ContainsFunc(g.trees, func(w string) bool { return c != w && Within(c, w) }) {
		return nil
	}
	return &fs.PathError{Op: "write", Path: p, Err: ErrNotWritable}
}

// WriteFile writes as Host.WriteFile does, within the grant.
func (g *Grant) WriteFile(p string, data []byte) error {
	if err := g.may(p); err != nil {
		return err
	}
	fd, err := g.h.open(p, unix.O_WRONLY|unix.O_TRUNC)
	if err != nil {
		return &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	g.h.writes.Add(1)
	// A write can be interrupted by a signal (Go's preemption signal
	// among them) while the kernel works for it: lowering
	// memory.limit_in_bytes reclaims memory first, and that reclaim
	// returns EINTR when a signal arrives. os.File retries such a write;
	// this door uses write(2) directly, so it retries here. Writing a
	// control file's value again is the same write.
	n, err := unix.Write(fd, data)
	for err == unix.EINTR {
		n, err = unix.Write(fd, data)
	}
	if err != nil {
		return &fs.PathError{Op: "write", Path: p, Err: err}
	}
	if n != len(data) {
		return &fs.PathError{Op: "write", Path: p, Err: fmt.Errorf("short write: %d of %d bytes", n, len(data))}
	}
	return nil
}

// Mkdir creates a directory as Host.Mkdir does, within the grant.
func (g *Grant) Mkdir(p string) error {
	return g.inParent(p, "mkdir", func(dirfd int, base string) error { return unix.Mkdirat(dirfd, base, 0o755) })
}

// Rmdir removes a directory as Host.Rmdir does, within the grant.
func (g *Grant) Rmdir(p string) error {
	return g.inParent(p, "rmdir", func(dirfd int, base string) error { return unix.Unlinkat(dirfd, base, unix.AT_REMOVEDIR) })
}

// inParent checks p against the grant, counts one write and runs op
// (named name in its error) on p's last element, from a descriptor of p's
// parent directory.
func (g *Grant) inParent(p, name string, op func(dirfd int, base string) error) error {
	if err := g.may(p); err != nil {
		return err
	}
	dir, base := path.Split(path.Clean(p))
	fd, err := g.h.open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	g.h.writes.Add(1)
	if err := op(fd, base); err != nil {
		return &fs.PathError{Op: name, Path: p, Err: err}
	}
	return nil
}

// Within reports whether host path p is dir or lies beneath it.
func Within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// open resolves p beneath the root. Paths under /proc may follow ordinary
// symlinks such as /proc/self (never magic links); everything else may
// follow none.
func (h *Host) open(p string, flags int) (int, error) {
	if h.root != "/" {
		// In a container the host's /proc is mounted under the root but
		// belongs to another pid namespace, where "self" resolves to
		// nothing; the host's init (pid 1) sees the host's mounts.
		if rest, ok := strings.CutPrefix(p, "/proc/self/"); ok {
			p = "/proc/1/" + rest
		}
	}
	rel, err := relative(p)
	if err != nil {
		return -1, err
	}
	resolve := uint64(unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS)
	if !Within(path.Clean(p), "/proc") {
		resolve |= unix.RESOLVE_NO_SYMLINKS
	}
	if !h.noOpenat2.Load() {
		for {
			fd, err := unix.Openat2(h.rootFD, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolve})
			if err == unix.EINTR || err == unix.EAGAIN {
				continue
			}
			if err != unix.ENOSYS {
				return fd, err
			}
			h.noOpenat2.Store(true)
			break
		}
	}
	// Fallback for kernels without openat2 (before 5.6): the path was
	// checked for ".." by relative; under /proc ordinary symlinks are
	// followed as above, elsewhere the path is walked one directory at a
	// time with O_NOFOLLOW, so no component may be a symlink.
	if resolve&unix.RESOLVE_NO_SYMLINKS == 0 {
		return unix.Openat(h.rootFD, rel, flags|unix.O_CLOEXEC, 0)
	}
	return openNoFollow(h.rootFD, rel, flags)
}

// openNoFollow opens rel beneath dirfd refusing a symlink in any
// component (ELOOP), the way RESOLVE_NO_SYMLINKS does.
func openNoFollow(dirfd int, rel string, flags int) (int, error) {
	dir, rest := -1, rel
	defer func() {
		if dir >= 0 {
			unix.Close(dir)
		}
	}()
	at := dirfd
	for {
		part, tail, more := strings.Cut(rest, "/")
		if !more {
			return unix.Openat(at, part, flags|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		}
		next, err := unix.Openat(at, part, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if err == unix.ENOTDIR {
				// O_NOFOLLOW|O_DIRECTORY on a symlink says ENOTDIR.
				var st unix.Stat_t
				if unix.Fstatat(at, part, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
					return -1, unix.ELOOP
				}
			}
			return -1, err
		}
		if dir >= 0 {
			unix.Close(dir)
		}
		dir, at, rest = next, next, tail
	}
}

// relative turns an absolute host path into one relative to the root,
// refusing ".." components outright.
func relative(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("not an absolute path")
	}
	for rest := p; rest != ""; {
		var part string
		part, rest, _ = strings.Cut(rest, "/")
		if part == ".." {
			return "", fmt.Errorf("path climbs with ..")
		}
	}
	rel := strings.TrimLeft(path.Clean(p), "/")
	if rel == "" {
		rel = "."
	}
	return rel, nil
}
