package inventory

import (
	"errors"
	"hash/fnv"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/stats"
)

// Steady makes a Scanner's repeated scans of one live host cheap: it keeps
// what a scan learnt that cannot change unseen, and reads again only what
// changes by itself.
//
//   - Counters (CPU usage, memory usage and memory.stat, pids.current,
//     cgroup.procs, ...) are read every scan, through descriptors kept open
//     (cgroupfs.Kept: one pread each instead of open+read+close).
//   - A cgroup's list of children and its settings (weight, quota, period,
//     idle, limits) are read when it is first seen, when inotify says they
//     changed (IN_CREATE/IN_DELETE of a child directory, IN_MODIFY of a
//     settings file: both delivered for cgroup directories on v1 and v2),
//     after an inotify overflow, and otherwise at least every Every scans
//     (staggered over the cgroups, so no scan pays for all of them).
//   - A cgroup not walked by a scan (removed, or no longer below the base)
//     is forgotten at its end: its descriptors closed, its watches removed.
//
// A steady-state scan gives the same Node as a full scan of the same tree
// (TestSteadyScanEqualsFullScan). Without inotify (or past the kernel's
// watch limit) the cgroups concerned are simply listed and their settings
// read at every scan.
type Steady struct {
	kept  *cgroupfs.Kept
	watch Watch
	// mounts are the hierarchies whose cgroup directories are watched;
	// mounts[0] is the one walked (Places.Tree).
	mounts []string
	// allMounts are every hierarchy a file is read from.
	allMounts []string
	every     int

	scan  int
	known map[string]*known

	// counts is the scan's, published at each scan's end for Counts,
	// which the metrics read from other goroutines.
	counts    SteadyCounts
	mu        sync.Mutex
	published SteadyCounts
}

// known is what Steady keeps of one cgroup between scans.
type known struct {
	seen     int // the last scan that listed it
	due      int // the scan from which its listing and settings are read again anyway
	children []string
	listed   bool
	settings *stats.Settings
	watched  bool
	// id is the cgroup's identity as layout.Child gave it for a parent
	// of identity parent (hasID): a pure function of the two, so it is
	// kept while the parent's stays the same.
	id, parent layout.Identity
	hasID      bool
}

// SteadyOptions tune a Steady; the zero value is the default.
type SteadyOptions struct {
	// Every bounds, in scans, how long a listing or settings are trusted
	// without a read (a safety net under inotify): DefaultEvery when 0.
	Every int
	// MaxOpen bounds the descriptors kept open (cgroupfs.DefaultKeptMax
	// when 0).
	MaxOpen int
	// NoWatch disables inotify: listings and settings are read at every
	// scan, counters still through kept descriptors.
	NoWatch bool
	// Watch is where the events come from: a subscription to an inotify
	// instance shared with other consumers (a cgroupfs.Hub's Sub, as the
	// node agent runs it). nil: the Steady opens its own. Close closes it.
	Watch Watch
}

// Watch is the inotify a steady scan takes its events from: its own
// cgroupfs.Watcher, or a cgroupfs.Sub of a Hub shared with others.
type Watch interface {
	Add(p string, mask uint32) error
	Remove(p string)
	Len() int
	// Poll returns the events since the last Poll without waiting.
	Poll() ([]cgroupfs.WatchEvent, error)
	Close() error
}

var (
	_ Watch = (*cgroupfs.Watcher)(nil)
	_ Watch = (*cgroupfs.Sub)(nil)
)

// DefaultEvery is SteadyOptions.Every's default: at a 10 s interval, each
// cgroup's listing and settings are read at least every 10 minutes even if
// no event said they changed.
const DefaultEvery = 60

// SteadyCounts is what a Steady has done, for its metrics.
type SteadyCounts struct {
	// Watches is the number of inotify watches held; WatchFailures the
	// cgroups that could not be watched (and are read in full each scan).
	Watches, WatchFailures int
	// Listings and SettingsReads count the directory listings and the
	// settings reads done; ListingsKept and SettingsKept those avoided.
	Listings, ListingsKept, SettingsReads, SettingsKept uint64
	// Events counts inotify events taken; Overflows the times events were
	// lost and everything was read again.
	Events, Overflows uint64
	// Forgotten counts cgroups dropped because a scan no longer saw them.
	Forgotten uint64
	Kept      cgroupfs.KeptStats
}

// NewSteady makes sc's scans steady-state scans of host h, which must be
// the host sc reads (sc.FS). Close releases its descriptors and watches.
func NewSteady(sc *Scanner, h *cgroupfs.Host, o SteadyOptions) (*Steady, error) {
	if sc.FS != cgroupfs.FS(h) {
		return nil, errors.New("steady-state scans need the scanner to read the live host they watch")
	}
	if o.Every <= 0 {
		o.Every = DefaultEvery
	}
	st := &Steady{kept: h.NewKept(o.MaxOpen), every: o.Every, known: map[string]*known{}}
	st.mounts = watchedMounts(sc.Places)
	for _, m := range []string{sc.Places.Unified, sc.Places.CPU, sc.Places.CPUAcct, sc.Places.Memory, sc.Places.Pids} {
		if m != "" && !slices.Contains(st.allMounts, m) {
			st.allMounts = append(st.allMounts, m)
		}
	}
	switch {
	case o.NoWatch:
	case o.Watch != nil:
		st.watch = o.Watch
	default:
		w, err := h.NewWatcher()
		if err != nil {
			st.kept.Close()
			return nil, err
		}
		st.watch = w
	}
	sc.Steady = st
	return st, nil
}

// watchedMounts are the hierarchies holding what a steady scan keeps: the
// walked tree first (children), then those of the settings files.
func watchedMounts(p mounts.Places) []string {
	if p.V2 {
		return []string{p.Unified}
	}
	out := []string{p.CPU}
	for _, m := range []string{p.Memory, p.Pids} {
		if m != "" && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// Close closes the kept descriptors and the watches.
func (st *Steady) Close() error {
	err := st.kept.Close()
	if st.watch != nil {
		err = errors.Join(err, st.watch.Close())
	}
	return err
}

// Counts reports what st holds and has done, as of the last scan's end;
// any goroutine may call it.
func (st *Steady) Counts() SteadyCounts {
	st.mu.Lock()
	c := st.published
	st.mu.Unlock()
	c.Kept = st.kept.Stats()
	if st.watch != nil {
		c.Watches = st.watch.Len()
	}
	return c
}

// begin starts a scan: it takes the events since the last one and
// invalidates what they say changed, and what is due for a fresh read.
func (st *Steady) begin() {
	st.scan++
	if st.watch != nil {
		evs, err := st.watch.Poll()
		st.counts.Events += uint64(len(evs))
		if err != nil {
			st.invalidateAll()
		}
		for _, ev := range evs {
			st.take(ev)
		}
	}
	for _, k := range st.known {
		if k.due <= st.scan {
			k.listed, k.settings = false, nil
			k.due = st.scan + st.every
		}
	}
}

// take invalidates what one event says changed.
func (st *Steady) take(ev cgroupfs.WatchEvent) {
	if ev.Mask&cgroupfs.EventOverflow != 0 {
		st.counts.Overflows++
		st.invalidateAll()
		return
	}
	cg, tree, ok := st.cgroupOf(ev.Path)
	if !ok {
		return
	}
	k := st.known[cg]
	switch {
	case ev.Mask&cgroupfs.EventIgnored != 0:
		// Its directory was removed (or the watch dropped): if the path
		// is walked again it is a new cgroup.
		if k != nil {
			k.listed, k.settings, k.watched = false, nil, false
		}
	case ev.Mask&(cgroupfs.EventCreate|cgroupfs.EventDelete) != 0:
		if tree && k != nil {
			k.listed = false
		}
		if child := st.known[joinClean(cg, ev.Name)]; child != nil {
			// Made again under the same name: a new cgroup.
			child.listed, child.settings, child.watched = false, nil, false
		}
	case ev.Mask&cgroupfs.EventModify != 0:
		if k != nil && stats.IsSettingsFile(ev.Name) {
			k.settings = nil
		}
	}
}

// cgroupOf maps a watched host directory to its cgroup path, and says
// whether it is in the walked tree.
func (st *Steady) cgroupOf(hostPath string) (cg string, tree, ok bool) {
	for i, m := range st.mounts {
		if cgroupfs.Within(hostPath, m) {
			rest := strings.TrimPrefix(hostPath, m)
			if rest == "" {
				rest = "/"
			}
			return rest, i == 0, true
		}
	}
	return "", false, false
}

func (st *Steady) invalidateAll() {
	for _, k := range st.known {
		k.listed, k.settings = false, nil
	}
}

// list returns the children of cgroup cg, from what is known when nothing
// can have changed them.
func (st *Steady) list(fsys cgroupfs.FS, tree, cg string) ([]string, error) {
	k := st.known[cg]
	if k != nil && k.listed && k.watched {
		k.seen = st.scan
		st.counts.ListingsKept++
		return k.children, nil
	}
	if k == nil {
		k = st.entry(cg)
	}
	// Watch before listing: a child made in between is then an event,
	// not a miss.
	if !k.watched {
		k.watched = st.addWatches(cg)
	}
	st.counts.Listings++
	names, err := fsys.ReadDirs(joinClean(tree, cg))
	if err != nil {
		k.listed = false
		return nil, err
	}
	k.children, k.listed, k.seen = names, true, st.scan
	return names, nil
}

// entry makes what is kept of cgroup cg.
func (st *Steady) entry(cg string) *known {
	k := &known{due: st.scan + st.every + stagger(cg, st.every)}
	st.known[cg] = k
	return k
}

// identity is layout.Child(parent, name) for cgroup cg, kept from the
// last scan when its parent's identity is the same (the name is part of
// cg): the walk names every cgroup at every scan, by regular expressions.
func (st *Steady) identity(cg string, parent layout.Identity, name string) layout.Identity {
	k := st.known[cg]
	if k == nil {
		k = st.entry(cg)
	}
	if !k.hasID || k.parent != parent {
		k.id, k.parent, k.hasID = layout.Child(parent, name), parent, true
	}
	return k.id
}

// stagger spreads the cgroups' periodic reads over Every scans.
func stagger(cg string, every int) int {
	h := fnv.New32a()
	h.Write([]byte(cg))
	return int(h.Sum32() % uint32(every))
}

// addWatches watches cg's directory in every watched hierarchy; false when
// inotify is off or a watch could not be added (it is then read in full
// at every scan). A hierarchy where the cgroup does not exist has nothing
// to watch.
func (st *Steady) addWatches(cg string) bool {
	if st.watch == nil {
		return false
	}
	for i, m := range st.mounts {
		mask := uint32(cgroupfs.EventModify)
		if i == 0 {
			mask |= cgroupfs.EventCreate | cgroupfs.EventDelete
		}
		if err := st.watch.Add(joinClean(m, cg), mask); err != nil {
			if i > 0 && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			st.counts.WatchFailures++
			return false
		}
	}
	return true
}

// read reads cg's Stats, taking its settings from what is known when
// nothing can have changed them.
func (st *Steady) read(r stats.Reader, cg string, withThreads bool) (stats.Stats, []error) {
	r.Counters = st.kept
	k := st.known[cg]
	if k != nil && k.settings != nil && k.watched {
		st.counts.SettingsKept++
		return r.ReadKnown(cg, withThreads, k.settings)
	}
	st.counts.SettingsReads++
	s, errs := r.Read(cg, withThreads)
	if k != nil && !s.Gone && len(errs) == 0 {
		set := s.Settings(r.Places.V2)
		k.settings = &set
	}
	return s, errs
}

// end finishes a scan: cgroups it did not walk are forgotten.
func (st *Steady) end() {
	var gone []string
	for cg, k := range st.known {
		if k.seen == st.scan {
			continue
		}
		delete(st.known, cg)
		st.counts.Forgotten++
		for _, m := range st.mounts {
			if st.watch != nil {
				st.watch.Remove(joinClean(m, cg))
			}
		}
		gone = append(gone, cg)
	}
	if len(gone) > 0 {
		st.kept.Forget(st.hostDirs(gone)...)
	}
	st.mu.Lock()
	st.published = st.counts
	st.mu.Unlock()
}

// hostDirs are the directories of cgroups in every hierarchy a counter
// can be read from.
func (st *Steady) hostDirs(cgs []string) []string {
	out := make([]string, 0, len(cgs)*len(st.allMounts))
	for _, cg := range cgs {
		for _, m := range st.allMounts {
			out = append(out, path.Join(m, cg))
		}
	}
	return out
}
