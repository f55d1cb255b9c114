package cgroupfs

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/cgwarden/cgwarden/internal/failpoint"
)

// Hub shares one inotify instance (a Watcher) between several
// subscribers: each adds and removes its own paths and gets the events on
// them, as if it had its own watcher. A node agent that scans steadily
// (inventory.Steady) and also holds files against overwrites (package
// hold) then keeps one inotify instance and one watch per path, not one
// per consumer.
//
// The kernel's mask on a path is the union of its subscribers' masks;
// each subscriber gets only the events its own mask asked for, plus
// EventIgnored (the watch is gone) and EventOverflow (events were lost:
// look again at everything), which every subscriber of the path, or every
// subscriber, gets. A subscriber that does not take its events falls
// behind by at most MaxQueued; past that its queue becomes one overflow
// event.
//
// One goroutine (started by NewHub, stopped by Close) moves the kernel's
// events into the subscribers' queues; Sync does it at once, so a scan
// that begins sees every event queued before it.
type Hub struct {
	w    *Watcher
	done chan struct{}

	// readMu makes one read and its dispatch one step, so events reach
	// the subscribers in the kernel's order.
	readMu sync.Mutex

	mu     sync.Mutex
	subs   map[*Sub]struct{}
	byPath map[string]map[*Sub]uint32
	closed bool
	err    error
}

// MaxQueued bounds the events one subscriber may have waiting.
const MaxQueued = 16 << 10

// NewHub starts a Hub on a new inotify instance of h. Close releases it.
func (h *Host) NewHub() (*Hub, error) {
	w, err := h.NewWatcher()
	if err != nil {
		return nil, err
	}
	hub := &Hub{w: w, done: make(chan struct{}), subs: map[*Sub]struct{}{}, byPath: map[string]map[*Sub]uint32{}}
	go hub.run()
	return hub, nil
}

// Subscribe returns a new subscriber with no path watched.
func (hub *Hub) Subscribe() *Sub {
	s := &Sub{hub: hub, ready: make(chan struct{}, 1), paths: map[string]uint32{}}
	hub.mu.Lock()
	hub.subs[s] = struct{}{}
	hub.mu.Unlock()
	return s
}

// Len is the number of inotify watches held (one per path, whatever the
// number of its subscribers).
func (hub *Hub) Len() int { return hub.w.Len() }

// Close stops the Hub's goroutine and releases the inotify instance; every
// subscriber's Poll returns an error from then on.
func (hub *Hub) Close() error {
	hub.mu.Lock()
	hub.closed = true
	hub.mu.Unlock()
	err := hub.w.Close()
	<-hub.done
	return err
}

// run moves events from the kernel to the subscribers until Close.
func (hub *Hub) run() {
	defer close(hub.done)
	sc, err := hub.w.file.SyscallConn()
	if err != nil {
		hub.fail(err)
		return
	}
	var buf [16 << 10]byte
	for {
		// A hub that lags behind the kernel (its goroutine not
		// scheduled on a loaded node): its subscribers' Poll must still
		// see every event.
		failpoint.Hit("cgroupfs/hub-read")
		var rerr error
		err := sc.Read(func(fd uintptr) bool {
			hub.readMu.Lock()
			defer hub.readMu.Unlock()
			var n int
			n, rerr = unix.Read(int(fd), buf[:])
			switch {
			case rerr == unix.EAGAIN:
				return false // wait until readable
			case rerr == unix.EINTR:
				rerr = nil
			case rerr == nil && n > 0:
				rerr = hub.dispatchBuf(buf[:n])
			}
			return true
		})
		if err == nil {
			err = rerr
		}
		if err != nil {
			hub.fail(err)
			return
		}
	}
}

// Sync moves every event the kernel has queued to the subscribers now.
func (hub *Hub) Sync() error {
	hub.readMu.Lock()
	defer hub.readMu.Unlock()
	return hub.w.drain(hub.dispatchBuf)
}

// fail ends the Hub: every subscriber is told with an overflow (look
// again) and its Poll returns err.
func (hub *Hub) fail(err error) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if hub.closed {
		err = fmt.Errorf("inotify hub closed: %w", err)
	}
	hub.err = err
	for s := range hub.subs {
		s.push(WatchEvent{Mask: EventOverflow})
	}
}

func (hub *Hub) dispatchBuf(b []byte) error {
	evs, err := hub.w.parse(b)
	hub.dispatch(evs)
	return err
}

// dispatch queues each event with the subscribers that asked for it.
func (hub *Hub) dispatch(evs []WatchEvent) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	for _, ev := range evs {
		if ev.Mask&EventOverflow != 0 {
			for s := range hub.subs {
				s.push(ev)
			}
			continue
		}
		subs := hub.byPath[ev.Path]
		for s, mask := range subs {
			if ev.Mask&(mask|EventIgnored) != 0 {
				s.push(ev)
			}
		}
		if ev.Mask&EventIgnored != 0 {
			// The kernel dropped the watch (the cgroup was removed).
			for s := range subs {
				delete(s.paths, ev.Path)
			}
			delete(hub.byPath, ev.Path)
		}
	}
}

// union is the kernel mask of p: every subscriber's.
func (hub *Hub) union(p string) uint32 {
	var m uint32
	for _, mask := range hub.byPath[p] {
		m |= mask
	}
	return m
}

// Sub is one subscriber of a Hub: it watches its own paths and takes its
// own events. Its methods may be called from any goroutine.
type Sub struct {
	hub   *Hub
	ready chan struct{}
	// Guarded by hub.mu.
	paths  map[string]uint32
	queue  []WatchEvent
	closed bool
}

// push queues ev (hub.mu held).
func (s *Sub) push(ev WatchEvent) {
	if s.closed {
		return
	}
	if len(s.queue) >= MaxQueued {
		s.queue = append(s.queue[:0], WatchEvent{Mask: EventOverflow})
	} else {
		s.queue = append(s.queue, ev)
	}
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Add watches host path p for the events in mask; adding a path again
// replaces its mask.
func (s *Sub) Add(p string, mask uint32) error {
	hub := s.hub
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if s.closed || hub.closed {
		return &fs.PathError{Op: "watch", Path: p, Err: fs.ErrClosed}
	}
	before := hub.union(p)
	if hub.byPath[p] == nil {
		hub.byPath[p] = map[*Sub]uint32{}
	}
	old, had := hub.byPath[p][s]
	hub.byPath[p][s] = mask
	if after := hub.union(p); after != before || before == 0 {
		if err := hub.w.Add(p, after); err != nil {
			if had {
				hub.byPath[p][s] = old
			} else {
				delete(hub.byPath[p], s)
				if len(hub.byPath[p]) == 0 {
					delete(hub.byPath, p)
				}
			}
			return err
		}
	}
	s.paths[p] = mask
	return nil
}

// Remove stops watching p for this subscriber (nothing when it does not
// watch it); the kernel's watch goes with its last subscriber.
func (s *Sub) Remove(p string) {
	hub := s.hub
	hub.mu.Lock()
	defer hub.mu.Unlock()
	s.remove(p)
}

// remove drops p (hub.mu held).
func (s *Sub) remove(p string) {
	hub := s.hub
	if _, ok := s.paths[p]; !ok {
		return
	}
	delete(s.paths, p)
	delete(hub.byPath[p], s)
	if len(hub.byPath[p]) == 0 {
		delete(hub.byPath, p)
		hub.w.Remove(p)
		return
	}
	// Narrow the kernel's mask to the subscribers left (re-adding a
	// watched inode replaces its mask, same watch).
	if err := hub.w.Add(p, hub.union(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return
	}
}

// Len is the number of paths this subscriber watches.
func (s *Sub) Len() int {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return len(s.paths)
}

// Ready receives a value when events may be waiting (then call Poll).
func (s *Sub) Ready() <-chan struct{} { return s.ready }

// Poll returns the events queued for this subscriber, after moving what
// the kernel holds (Sync); none when nothing happened. After the Hub
// failed or closed it returns the events left and the error.
func (s *Sub) Poll() ([]WatchEvent, error) {
	serr := s.hub.Sync()
	hub := s.hub
	hub.mu.Lock()
	defer hub.mu.Unlock()
	out := s.queue
	s.queue = nil
	if hub.err != nil {
		return out, hub.err
	}
	return out, serr
}

// Close removes every path of this subscriber and stops its events.
func (s *Sub) Close() error {
	hub := s.hub
	hub.mu.Lock()
	defer hub.mu.Unlock()
	for p := range s.paths {
		s.remove(p)
	}
	s.closed = true
	s.queue = nil
	delete(hub.subs, s)
	return nil
}
