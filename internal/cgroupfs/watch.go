package cgroupfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Watch event masks cgwarden uses (inotify(7)). A write(2) to a cgroup
// file raises IN_MODIFY on it (the VFS raises it for every filesystem,
// cgroup v1 and v2 alike); mkdir and rmdir of a child cgroup raise
// IN_CREATE and IN_DELETE on its parent; IN_IGNORED follows the removal of
// a watched cgroup.
const (
	EventModify  = unix.IN_MODIFY
	EventCreate  = unix.IN_CREATE
	EventDelete  = unix.IN_DELETE
	EventIgnored = unix.IN_IGNORED
	// EventOverflow says events were lost: whoever watches must look
	// again at everything.
	EventOverflow = unix.IN_Q_OVERFLOW
)

// WatchEvent is one inotify event.
type WatchEvent struct {
	// Path is the watched host path the event is on; Name the child it
	// names (IN_CREATE, IN_DELETE), "" otherwise.
	Path string
	Name string
	Mask uint32
}

// Watcher watches cgroup files and directories beneath a Host's root with
// inotify. Paths are resolved by the Host's one door (beneath the root, no
// symlinks) and the watch is added on the opened file, so a path cannot
// smuggle a watch outside the root. Written by hand because the Go
// notification libraries (fsnotify) resolve paths themselves, outside the
// door, and hide IN_Q_OVERFLOW and the raw masks cgwarden needs.
type Watcher struct {
	h    *Host
	file *os.File
	mu   sync.Mutex
	wds  map[int32]string
	byP  map[string]int32
}

// NewWatcher starts an inotify instance. Close releases it.
func (h *Host) NewWatcher() (*Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	// A non-blocking descriptor in an *os.File uses Go's poller: Read
	// waits without a thread, and Close wakes it.
	w := &Watcher{h: h, file: os.NewFile(uintptr(fd), "inotify"), wds: map[int32]string{}, byP: map[string]int32{}}
	track(h, &h.watchers, w, true)
	return w, nil
}

// Add watches host path p for the events in mask. Watching a path twice
// replaces its mask.
func (w *Watcher) Add(p string, mask uint32) error {
	fd, err := w.h.open(p, unix.O_PATH)
	if err != nil {
		return &fs.PathError{Op: "watch", Path: p, Err: err}
	}
	defer unix.Close(fd)
	sc, err := w.file.SyscallConn()
	if err != nil {
		return err
	}
	var wd int
	var werr error
	// The magic link of the descriptor just opened beneath the root names
	// exactly that file, whatever happens to the path meanwhile.
	if cerr := sc.Control(func(ifd uintptr) {
		wd, werr = unix.InotifyAddWatch(int(ifd), "/proc/self/fd/"+strconv.Itoa(fd), mask)
	}); cerr != nil {
		return cerr
	}
	if werr != nil {
		return &fs.PathError{Op: "inotify_add_watch", Path: p, Err: werr}
	}
	w.mu.Lock()
	w.wds[int32(wd)] = p
	w.byP[p] = int32(wd)
	w.mu.Unlock()
	return nil
}

// Remove stops watching p (nothing when it is not watched).
func (w *Watcher) Remove(p string) {
	w.mu.Lock()
	wd, ok := w.byP[p]
	delete(w.byP, p)
	delete(w.wds, wd)
	w.mu.Unlock()
	if !ok {
		return
	}
	if sc, err := w.file.SyscallConn(); err == nil {
		_ = sc.Control(func(ifd uintptr) { _, _ = unix.InotifyRmWatch(int(ifd), uint32(wd)) })
	}
}

// Len is the number of watches.
func (w *Watcher) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.wds)
}

// Read blocks until events arrive and returns them; after Close it
// returns an error that wraps os.ErrClosed.
func (w *Watcher) Read() ([]WatchEvent, error) {
	var buf [16 << 10]byte
	n, err := w.file.Read(buf[:])
	if err != nil {
		return nil, err
	}
	return w.parse(buf[:n])
}

// Poll returns the events queued now without waiting (none when nothing
// is queued): a scan takes what happened since the last one.
func (w *Watcher) Poll() ([]WatchEvent, error) {
	var out []WatchEvent
	err := w.drain(func(b []byte) error {
		evs, err := w.parse(b)
		out = append(out, evs...)
		return err
	})
	return out, err
}

// drain makes non-blocking read(2)s of the inotify instance until its
// queue is empty (EAGAIN), handing each read's records to each; the first
// error of a read or of each ends it.
func (w *Watcher) drain(each func([]byte) error) error {
	sc, err := w.file.SyscallConn()
	if err != nil {
		return err
	}
	var buf [16 << 10]byte
	var rerr error
	if cerr := sc.Control(func(fd uintptr) {
		for {
			n, err := unix.Read(int(fd), buf[:])
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN || n == 0:
				return
			case err != nil:
				rerr = &fs.PathError{Op: "read", Path: "inotify", Err: err}
				return
			}
			if rerr = each(buf[:n]); rerr != nil {
				return
			}
		}
	}); cerr != nil {
		return cerr
	}
	return rerr
}

// parse decodes a buffer of struct inotify_event records.
func (w *Watcher) parse(b []byte) ([]WatchEvent, error) {
	var out []WatchEvent
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return out, errors.New("inotify: truncated event")
		}
		name := string(b[unix.SizeofInotifyEvent:end])
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		p := w.wds[ev.Wd]
		if ev.Mask&unix.IN_IGNORED != 0 {
			delete(w.wds, ev.Wd)
			if w.byP[p] == ev.Wd {
				delete(w.byP, p)
			}
		}
		out = append(out, WatchEvent{Path: p, Name: name, Mask: ev.Mask})
		b = b[end:]
	}
	return out, nil
}

// Close releases the inotify instance and every watch; a Read waiting
// returns.
func (w *Watcher) Close() error {
	track(w.h, &w.h.watchers, w, false)
	return w.file.Close()
}
