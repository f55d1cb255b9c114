package hold

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/failpoint"
	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// Sizes gives the pods' metadata as it is now; the Holder reads their
// declared sizes (metadata.DeclaredSize) from it.
type Sizes func(ctx context.Context) (*metadata.Set, error)

// Defaults of Config.
const (
	DefaultCheck  = 250 * time.Millisecond
	DefaultPoll   = 10 * time.Second
	DefaultResync = time.Minute
	// DefaultRestoreDelay is how long an overwritten target is left
	// before it is restored. The kubelet (runc's cgroups library) reads
	// cpu.shares back right after writing it and fails when it finds
	// another value ("the minimum allowed cpu-shares is …"); at its start
	// that failure is fatal ("Failed to start ContainerManager"). A
	// restore inside that window made a restarted kubelet exit in the
	// cluster lane's fault suite. The delay leaves the read-back to the
	// kubelet, and keeps a restore well within a second.
	DefaultRestoreDelay = 200 * time.Millisecond
)

// Config configures a Holder.
type Config struct {
	// Host is the door the Holder reads, writes and watches through.
	Host *cgroupfs.Host
	// Engine journals the first write of each file; its FS is Host and
	// its Base the cgroup scans start from.
	Engine *fix.Engine
	Sizes  Sizes
	// Rules are the weight rules to hold (rules.SizeBlindWeights,
	// rules.BestEffortStarvation); empty holds both.
	Rules []string
	// MaxTierMilliCPU caps the sizes the tier counts (0: the node's CPUs).
	MaxTierMilliCPU int64
	// Check is how often the sizes are looked at (NoCheck: never; the
	// offered scans carry them), Poll how often every target file is read
	// again (in case an event was lost), Resync how often the node is
	// planned again without any event. RestoreDelay is how long an
	// overwritten target waits before it is restored (DefaultRestoreDelay
	// when 0).
	Check, Poll, Resync, RestoreDelay time.Duration
	// Changed, when set, says the sizes may have changed: the Holder
	// reads them at once (the sources' informers notify it; Check is
	// then for what cannot notify, or NoCheck).
	Changed <-chan struct{}
	Log     *slog.Logger
	// OnApply is told of every journaled apply (for Events); may be nil.
	OnApply func(*fix.Result)

	// Loop is the node loop the Holder plans from (the agent's): it
	// offers the Holder every scan it makes (Holder.Offer), and the
	// Holder asks it for a fresh one (Loop.Fresh) only when cgroups came
	// or went or a size changed. Each offered scan's sizes are compared
	// with the last plan's, and a Resync plans from the next offered
	// scan: neither asks the loop for a scan of its own (with the CRI as
	// pod source an extra scan is an extra listing of the runtime; the
	// loop's own scans already read the sizes).
	Loop Loop
	// Watch is the Holder's subscription to the node loop's inotify Hub,
	// for its sub-second path (target files, tiers and sized pods). Run
	// closes it.
	Watch *cgroupfs.Sub
	// Apply runs f on the one goroutine that makes every write of the
	// agent, and waits for it.
	Apply func(f func())
}

// NoCheck as Config.Check: the Holder never reads the sizes on its own
// (they come with the offered scans, or cannot change: no pod source).
const NoCheck time.Duration = -1

// Loop is the node loop as the Holder sees it.
type Loop interface {
	// Fresh returns a scan begun after the call, its pods named with
	// the metadata (and sizes) it returns.
	Fresh(ctx context.Context) (*inventory.Node, *metadata.Set, error)
	// Places are the hierarchies the scans read.
	Places() mounts.Places
}

// held is one target file and what happened to it.
type held struct {
	t    plan.Target
	want string
	// resets counts overwrites that were undone; off is the time from
	// noticing each to restoring the target.
	resets uint64
	off    time.Duration
	// The time-weighted value: integral of the value over time since
	// since; cur is the value the file holds from curAt.
	since    time.Time
	integral float64
	cur      float64
	curAt    time.Time
}

func (f *held) advance(now time.Time, v float64) {
	f.integral += f.cur * now.Sub(f.curAt).Seconds()
	f.cur, f.curAt = v, now
}

// effective is the time-weighted value the file held since the Holder
// took it on.
func (f *held) effective(now time.Time) float64 {
	span := now.Sub(f.since).Seconds()
	if span <= 0 {
		return f.cur
	}
	return (f.integral + f.cur*now.Sub(f.curAt).Seconds()) / span
}

// Holder holds weight targets; see the package comment.
type Holder struct {
	cfg  Config
	log  *slog.Logger
	loop Loop
	w    *cgroupfs.Sub

	// Owned by Run's goroutine.
	dirs map[string]bool
	// overwritten holds the targets seen off their value and not yet
	// restored: when each was first seen off, and when it may be restored
	// (RestoreDelay after the last change seen to it).
	overwritten map[string]overwrite
	lastMeta    *metadata.Set
	lastSize    string
	// offers holds the newest scan offered and not yet looked at.
	offers chan offer

	mu sync.Mutex
	// trees are the kubelet's root cgroups of the last plan's policy.
	trees []string
	files map[string]*held
	gone  map[string]*held // targets dropped, kept for their counters until the next scrape
	// lowered is the value each weight `fix --apply` set was last lowered
	// to, with a warning (sayLowered).
	lowered map[string]string
	replans uint64
	// fresh counts the scans asked of the loop (Loop.Fresh).
	fresh uint64
	errs  uint64
}

// New checks the configuration and returns a Holder; Run starts it.
func New(cfg Config) (*Holder, error) {
	if cfg.Host == nil || cfg.Engine == nil || cfg.Sizes == nil || cfg.Loop == nil || cfg.Watch == nil || cfg.Apply == nil {
		return nil, errors.New("hold: Host, Engine, Sizes, Loop, Watch and Apply are required")
	}
	for _, r := range cfg.Rules {
		if r != rules.SizeBlindWeights && r != rules.BestEffortStarvation {
			return nil, fmt.Errorf("hold: %s is not a weight rule (%s, %s)", r, rules.SizeBlindWeights, rules.BestEffortStarvation)
		}
	}
	if len(cfg.Rules) == 0 {
		cfg.Rules = []string{rules.SizeBlindWeights, rules.BestEffortStarvation}
	}
	if cfg.Check == 0 {
		cfg.Check = DefaultCheck
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.RestoreDelay <= 0 {
		cfg.RestoreDelay = DefaultRestoreDelay
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Holder{cfg: cfg, log: cfg.Log.With("component", "hold"), loop: cfg.Loop, w: cfg.Watch,
		dirs: map[string]bool{}, overwritten: map[string]overwrite{}, files: map[string]*held{}, gone: map[string]*held{}, lowered: map[string]string{},
		offers: make(chan offer, 1)}, nil
}

// offer is a scan the loop made, with the metadata it named pods with.
type offer struct {
	node *inventory.Node
	meta *metadata.Set
}

// Offer hands the Holder a scan the node loop has just made. It never
// blocks: a scan not yet looked at is replaced by the newer one
// (OfferLatest).
func (h *Holder) Offer(n *inventory.Node, meta *metadata.Set) {
	OfferLatest(h.offers, offer{node: n, meta: meta})
}

// OfferLatest puts v in ch, a channel buffered for one, without blocking:
// a value not yet taken is dropped for v (its taker works from the
// latest).
func OfferLatest[T any](ch chan T, v T) {
	for {
		select {
		case ch <- v:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// Run holds the targets until ctx ends. It returns an error only when it
// cannot watch at all; failures of single plans are logged and retried.
func (h *Holder) Run(ctx context.Context) error {
	w := h.w
	defer w.Close()
	h.replan(ctx, nil)
	var checks <-chan time.Time
	if h.cfg.Check > 0 {
		check := time.NewTicker(h.cfg.Check)
		defer check.Stop()
		checks = check.C
	}
	poll := time.NewTicker(h.cfg.Poll)
	defer poll.Stop()
	resync := time.NewTicker(h.cfg.Resync)
	defer resync.Stop()
	restore := time.NewTimer(time.Hour)
	restore.Stop()
	defer restore.Stop()
	// resyncDue: a Resync waits for the next offered scan.
	resyncDue := false
	for {
		var dirty bool
		var from *offer
		var err error
		select {
		case <-ctx.Done():
			return nil
		case <-w.Ready():
			dirty, err = h.events()
		case o := <-h.offers:
			if resyncDue || h.differ(o.meta) {
				resyncDue, from = false, &o
			}
		case <-checks:
			dirty = h.sizesChanged(ctx)
		case <-h.cfg.Changed:
			dirty = h.sizesChanged(ctx)
		case <-poll.C:
			dirty = h.review()
		case <-restore.C:
			dirty, err = h.restoreDue()
		case <-resync.C:
			resyncDue = true
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch {
		case dirty:
			// Cgroups came or went: a scan begun after the events.
			h.replan(ctx, nil)
		case from != nil:
			h.replan(ctx, from)
		}
		if next, ok := h.nextDue(); ok {
			restore.Reset(time.Until(next))
		} else {
			restore.Stop()
		}
	}
}

// overwrite is a target seen off its value: first is when, due when it
// may be restored.
type overwrite struct{ first, due time.Time }

// overwritten notes that target p was seen changed at now: it is restored
// RestoreDelay after the last change seen to it, and counted off target
// from the first. The kubelet (runc) reads its own write back at once;
// that read-back must find the kubelet's value, whoever wrote last
// before it (the holder's own restore also shows as a change).
func (h *Holder) overwrite(p string, now time.Time) {
	o, ok := h.overwritten[p]
	if !ok {
		o.first = now
	}
	o.due = now.Add(h.cfg.RestoreDelay)
	h.overwritten[p] = o
}

// nextDue is the earliest time an overwritten target may be restored.
func (h *Holder) nextDue() (next time.Time, ok bool) {
	for _, o := range h.overwritten {
		if !ok || o.due.Before(next) {
			next, ok = o.due, true
		}
	}
	return next, ok
}

// events reads the pending inotify events and handles them.
func (h *Holder) events() (dirty bool, err error) {
	evs, err := h.w.Poll()
	if err != nil {
		return false, fmt.Errorf("hold: reading inotify events: %w", err)
	}
	return h.handle(evs), nil
}

// restoreDue restores every overwritten target whose time has come (each
// read again then: it may be back at its target already) and reports
// whether one is gone (plan again).
//
// On the applier, a change not handled yet moves its file's time on
// first: the events are taken from the kernel then (Poll syncs the hub),
// not only those Ready has announced. The hub's goroutine can lag on a
// loaded node, and the applier can be busy (an adoption's moves): with
// only Ready looked at, the delay counted from the holder's own last
// restore ran out 100 ms into the kubelet's next write, which was
// restored inside its read-back (the race lane's
// TestHoldLeavesTheKubeletsReadBack, in CI).
func (h *Holder) restoreDue() (dirty bool, err error) {
	h.cfg.Apply(func() {
		if dirty, err = h.events(); err != nil {
			return
		}
		now := time.Now()
		for p, o := range h.overwritten {
			if o.due.After(now) {
				continue
			}
			delete(h.overwritten, p)
			dirty = !h.correct(p, o.first) || dirty
		}
	})
	return dirty, err
}

// handle notes the target files the events say were written (restored
// after RestoreDelay) and reports whether the set of cgroups changed
// (plan again).
func (h *Holder) handle(evs []cgroupfs.WatchEvent) (dirty bool) {
	now := time.Now()
	for _, ev := range evs {
		switch {
		case ev.Mask&cgroupfs.EventOverflow != 0:
			h.log.Warn("inotify queue overflowed: reading every target again")
			h.review()
			dirty = true
		case ev.Mask&(cgroupfs.EventCreate|cgroupfs.EventDelete) != 0:
			dirty = true
		case ev.Mask&cgroupfs.EventIgnored != 0:
			// A watched file or directory went with its cgroup.
			dirty = dirty || h.isTarget(ev.Path) || h.dirs[ev.Path]
		case ev.Mask&cgroupfs.EventModify != 0:
			if h.isTarget(ev.Path) {
				h.overwrite(ev.Path, now)
			}
		}
	}
	return dirty
}

func (h *Holder) isTarget(p string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.files[p]
	return ok
}

// correct reads target file p and, when it holds anything but the target,
// writes the target back; it runs on the agent's applier (Config.Apply).
// It reports false when the file is gone. The time off target counts from
// noticed, when the change was seen.
func (h *Holder) correct(p string, noticed time.Time) bool {
	h.mu.Lock()
	f, ok := h.files[p]
	h.mu.Unlock()
	if !ok {
		return true
	}
	b, err := h.cfg.Host.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		h.log.Warn("reading a held weight", "path", p, "err", err)
		return true
	}
	cur := strings.TrimSpace(string(b))
	if cur == f.want {
		return true
	}
	op := plan.Op{Kind: plan.Write, Rule: f.t.Rule, Path: p, Value: f.want}
	if f.t.Unit != "" {
		// systemd's unit: the property, which systemd keeps.
		op.Kind, op.Unit, op.Property = plan.Property, f.t.Unit, f.t.Property
	}
	h.mu.Lock()
	pol := plan.Policy{Weights: []string{p}, Trees: h.trees}
	h.mu.Unlock()
	if err := pol.Check(op); err != nil {
		h.log.Error("refusing to write a held weight", "path", p, "err", err)
		return true
	}
	werr := h.restoreWrite(op, pol)
	// A held weight restored, the restore not yet counted.
	failpoint.Hit("hold/after-restore")
	done := time.Now()
	if errors.Is(werr, fs.ErrNotExist) {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if werr != nil {
		h.errs++
		h.log.Error("restoring a held weight", "path", p, "found", cur, "want", f.want, "err", werr)
		return true
	}
	v, _ := strconv.ParseFloat(cur, 64)
	f.advance(noticed, v)
	f.advance(done, float64(f.t.Value))
	f.resets++
	f.off += done.Sub(noticed)
	h.log.Info("weight overwritten; target restored", "cgroup", f.t.Cgroup, "found", cur, "target", f.want, "took", done.Sub(noticed))
	return true
}

// review reads every target again, for changes the watch may have
// missed: one found off its value is restored as an event's would be,
// RestoreDelay from now. It reports whether a target is gone.
func (h *Holder) review() (dirty bool) {
	h.mu.Lock()
	want := make(map[string]string, len(h.files))
	for p, f := range h.files {
		want[p] = f.want
	}
	h.mu.Unlock()
	now := time.Now()
	for p, v := range want {
		b, err := h.cfg.Host.ReadFile(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			dirty = true
		case err != nil:
			h.log.Warn("reading a held weight", "path", p, "err", err)
		case strings.TrimSpace(string(b)) != v:
			if _, ok := h.overwritten[p]; !ok {
				h.overwrite(p, now)
			}
		}
	}
	return dirty
}

// sizesChanged reads the sizes and reports whether a declared size
// differs from the last plan's.
func (h *Holder) sizesChanged(ctx context.Context) bool {
	meta, err := h.cfg.Sizes(ctx)
	if err != nil {
		h.log.Warn("reading pod sizes", "err", err)
		return false
	}
	return h.differ(meta)
}

// differ reports whether meta declares other sizes than the last plan's.
func (h *Holder) differ(meta *metadata.Set) bool {
	if meta == h.lastMeta {
		return false
	}
	return sizeKey(meta) != h.lastSize
}

// sizeKey is a fingerprint of every declared size.
func sizeKey(meta *metadata.Set) string {
	var parts []string
	for _, p := range meta.Pods() {
		sz, ok, err := meta.DeclaredSize(p.UID)
		switch {
		case err != nil:
			parts = append(parts, p.UID+"!"+err.Error())
		case ok:
			parts = append(parts, p.UID+"="+strconv.FormatInt(sz.MilliCPU, 10))
		}
		if c := p.Annotation[vmsize.AnnotationContainer]; c != "" {
			parts = append(parts, p.UID+"@"+c)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// replan plans the weights from a scan (first, an offered one; else one
// asked of the loop), applies them and watches what it holds. A container
// cgroup made between the scan and the watch on its pod is caught by
// listing the newly watched directories again, and planned from a fresh
// scan.
func (h *Holder) replan(ctx context.Context, first *offer) {
	for round := 0; round < 3; round++ {
		again, err := h.replanOnce(ctx, first)
		first = nil
		if err != nil {
			h.mu.Lock()
			h.errs++
			h.mu.Unlock()
			h.log.Error("planning weights", "err", err)
			return
		}
		if !again {
			return
		}
	}
}

// replanOnce is one round of replan: the scan, the plan and its writes,
// then the watches on what it holds. again asks for another round.
func (h *Holder) replanOnce(ctx context.Context, from *offer) (again bool, err error) {
	n, meta, err := h.scanFor(ctx, from)
	if err != nil {
		return false, err
	}
	places := h.loop.Places()
	p, pol, err := plan.Weights(plan.WeightInput{Node: n, Places: places, FS: h.cfg.Host, Meta: meta,
		Only: h.cfg.Rules, MaxTierMilliCPU: h.cfg.MaxTierMilliCPU, Units: h.cfg.Engine.Units})
	if err != nil {
		return false, err
	}
	var resets []string
	h.cfg.Apply(func() { resets, err = h.apply(p, pol, meta) })
	if err != nil {
		return false, err
	}
	h.lastMeta, h.lastSize = meta, sizeKey(meta)

	now := time.Now()
	// A held target the plan found reset (the kubelet's write, its event
	// not handled yet): restored and counted as an event's would be, after
	// RestoreDelay, not written at once behind the kubelet's read-back.
	for _, p := range resets {
		h.overwrite(p, now)
	}
	// Watch the target files, and the tiers and sized pods for cgroups
	// that come and go.
	point := places.CPU
	if places.V2 {
		point = places.Unified
	}
	missing, err := h.watchTargets(p.Targets, pol, now)
	if err != nil {
		return false, err
	}
	added, gone, err := h.watchDirs(watchedDirs(n, p.Targets, point))
	if err != nil {
		return false, err
	}
	return missing || gone || h.unseenChildren(n, added, point), nil
}

// scanFor is the picture a round plans from: the offered one, else a
// fresh scan asked of the loop.
func (h *Holder) scanFor(ctx context.Context, from *offer) (*inventory.Node, *metadata.Set, error) {
	if from != nil {
		return from.node, from.meta, nil
	}
	h.mu.Lock()
	h.fresh++
	h.mu.Unlock()
	return h.loop.Fresh(ctx)
}

// watchedDirs is every directory whose children the holder watches: the
// parents of the targets that are not containers' own (tiers, pods), and
// the BestEffort tier.
func watchedDirs(n *inventory.Node, targets []plan.Target, point string) map[string]bool {
	dirs := map[string]bool{}
	for _, t := range targets {
		if t.Role != plan.RoleContainer {
			dirs[path.Dir(t.Path)] = true
		}
	}
	if n.KubeRoot != nil {
		for _, c := range n.KubeRoot.Children {
			if c.Identity.Kind == layout.QoSTier && c.Identity.QoS == layout.BestEffort {
				dirs[path.Join(point, c.Path)] = true
			}
		}
	}
	return dirs
}

// watchTargets makes the held files the plan's targets: a file no longer
// a target is let go (kept in gone for its reset count), a held one whose
// value changed advances its record, a new one is watched. missing says a
// target vanished before its watch (the plan is stale).
func (h *Holder) watchTargets(targets []plan.Target, pol plan.Policy, now time.Time) (missing bool, err error) {
	want := make(map[string]plan.Target, len(targets))
	for _, t := range targets {
		want[t.Path] = t
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for p, f := range h.files {
		if _, ok := want[p]; !ok {
			h.w.Remove(p)
			delete(h.files, p)
			h.gone[p] = f
		}
	}
	for p, t := range want {
		v := strconv.FormatUint(t.Value, 10)
		if f, ok := h.files[p]; ok {
			if f.want != v {
				f.advance(now, float64(t.Value))
			}
			f.t, f.want = t, v
			continue
		}
		if err := h.w.Add(p, cgroupfs.EventModify); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				missing = true
				continue
			}
			return false, err
		}
		h.files[p] = &held{t: t, want: v, since: now, cur: float64(t.Value), curAt: now}
	}
	h.replans++
	h.trees = pol.Trees
	return missing, nil
}

// watchDirs watches exactly dirs for children made and removed. added
// are the newly watched; gone says one vanished before its watch.
func (h *Holder) watchDirs(dirs map[string]bool) (added []string, gone bool, err error) {
	for d := range h.dirs {
		if !dirs[d] {
			h.w.Remove(d)
			delete(h.dirs, d)
		}
	}
	for d := range dirs {
		if h.dirs[d] {
			continue
		}
		if err := h.w.Add(d, cgroupfs.EventCreate|cgroupfs.EventDelete); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				gone = true
				continue
			}
			return nil, false, err
		}
		h.dirs[d] = true
		added = append(added, d)
	}
	return added, gone, nil
}

// unseenChildren says whether a newly watched directory has a child the
// scan did not know: made before the watch, it raised no event, so it is
// listed here.
func (h *Holder) unseenChildren(n *inventory.Node, added []string, point string) bool {
	for _, d := range added {
		kids, err := h.cfg.Host.ReadDirs(d)
		if err != nil {
			continue
		}
		var known []string
		if c := n.Find(strings.TrimPrefix(d, strings.TrimSuffix(point, "/"))); c != nil {
			for _, k := range c.Children {
				known = append(known, k.Name())
			}
		}
		for _, k := range kids {
			if !slices.Contains(known, k) {
				return true
			}
		}
	}
	return false
}

// apply writes a weight plan: the files never written before through
// the journal (their first value kept for revert), the others at once (a
// new size, or a reset that happened while no watch was on them). A file
// held already at the op's value was reset under the watch: apply leaves
// it to the restore path (RestoreDelay, counted in resets) and returns it.
func (h *Holder) apply(p *plan.Plan, pol plan.Policy, meta *metadata.Set) (resets []string, err error) {
	entries, err := h.cfg.Engine.JournalEntries()
	if err != nil {
		return nil, err
	}
	runs := journal.Applies(entries)
	written := journal.Written(runs)
	byFix := journal.WrittenBy(runs, journal.ByFix)
	first := *p
	first.Ops = nil
	var again []plan.Op
	for _, op := range p.Ops {
		if written[journalKey(op)] {
			again = append(again, op)
		} else {
			first.Ops = append(first.Ops, op)
		}
	}
	if len(first.Ops) > 0 {
		res, err := h.cfg.Engine.ApplyPlan(&first, pol)
		if err != nil {
			return nil, fmt.Errorf("applying weights: %w", err)
		}
		if h.cfg.OnApply != nil {
			h.cfg.OnApply(res)
		}
	}
	for _, op := range again {
		if h.heldAt(op.Path, op.Value) {
			resets = append(resets, op.Path)
			continue
		}
		if err := pol.Check(op); err != nil {
			return nil, err
		}
		h.sayLowered(op, byFix, meta)
		if err := h.write(op); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return resets, nil
}

// sayLowered warns, once per file and value, before op lowers a weight
// that `cgwarden fix --apply` set (journal.ByFix): which declared sizes
// the holder does not believe, and why. An agent that silently undid the
// operator's fix left the VMs at 0% under a hog (issue 38, item 4).
func (h *Holder) sayLowered(op plan.Op, byFix map[string]string, meta *metadata.Set) {
	key := journalKey(op)
	set, ok := byFix[key]
	if !ok {
		return
	}
	was, err1 := strconv.ParseUint(set, 10, 64)
	now, err2 := strconv.ParseUint(op.Value, 10, 64)
	if err1 != nil || err2 != nil || now >= was {
		return
	}
	h.mu.Lock()
	told := h.lowered[key] == op.Value
	h.lowered[key] = op.Value
	h.mu.Unlock()
	if told {
		return
	}
	// The sizes not believed: the pod's own for a pod's weight, every
	// pod's for the tier's (each counted in it when believed).
	var notBelieved []string
	for _, o := range meta.Origins() {
		if o.Ignored != "" && (op.Pod == "" || o.Pod.UID == op.Pod) {
			notBelieved = append(notBelieved, fmt.Sprintf("%s/%s: %s (%dm): %s", o.Pod.Namespace, o.Pod.Name, o.Via, o.DeclaredMilliCPU, o.Ignored))
		}
	}
	why := "no declared size is refused: the sizes believed now are smaller than those fix used"
	if len(notBelieved) > 0 {
		why = "sizes fix believed are not believed here"
	}
	if len(notBelieved) > maxToldSizes {
		notBelieved = append(notBelieved[:maxToldSizes], fmt.Sprintf("and %d more", len(notBelieved)-maxToldSizes))
	}
	h.log.Warn("lowering a weight that `cgwarden fix --apply` set: "+why, "path", op.Path, "pod", op.Pod,
		"fixSet", set, "now", op.Value, "notBelieved", strings.Join(notBelieved, "; "))
}

// maxToldSizes bounds the sizes one warning of sayLowered lists.
const maxToldSizes = 10

// heldAt reports whether target file p is held already at value v.
func (h *Holder) heldAt(p, v string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, ok := h.files[p]
	return ok && f.want == v
}

// restoreWrite writes a held weight back. A target the journal has never
// recorded (it was at its value when first planned, so nothing was
// written) goes through the journal, so that revert puts back what was
// written over it since: without, a sized pod whose cgroup had its target
// before the kubelet wrote its minimum kept the target after revert --all
// (the cluster lane's fault suite, seed 1796560840248274810: a 1-CPU VM's
// pod at the kernel's 1024, its target, weighed 1024 after revert, not
// the kubelet's 2).
func (h *Holder) restoreWrite(op plan.Op, pol plan.Policy) error {
	entries, err := h.cfg.Engine.JournalEntries()
	if err != nil {
		return err
	}
	if journal.Written(journal.Applies(entries))[journalKey(op)] {
		return h.write(op)
	}
	res, err := h.cfg.Engine.ApplyPlan(&plan.Plan{Ops: []plan.Op{op}}, pol)
	if err == nil && h.cfg.OnApply != nil {
		h.cfg.OnApply(res)
	}
	return err
}

// journalKey is how journal.Written names op's target: its clean path,
// or journal.PropertyKey for a unit property.
func journalKey(op plan.Op) string {
	if op.Kind == plan.Property {
		return journal.PropertyKey(op)
	}
	return path.Clean(op.Path)
}

// write applies one checked weight operation through a writer made for
// it alone: a grant of the door for the one file (Write), or of systemd
// for the one unit (Property).
func (h *Holder) write(op plan.Op) error {
	if op.Kind != plan.Property {
		g := h.cfg.Host.Grant(nil, []string{op.Path})
		defer g.End()
		return g.WriteFile(op.Path, []byte(op.Value))
	}
	if h.cfg.Engine.Units == nil {
		return fmt.Errorf("%s of %s: no connection to systemd", op.Property, op.Unit)
	}
	v, err := strconv.ParseUint(op.Value, 10, 64)
	if err != nil {
		return fmt.Errorf("%s of %s: bad value %q: %w", op.Property, op.Unit, op.Value, err)
	}
	g := h.cfg.Engine.Units.Grant([]string{op.Unit})
	defer g.End()
	return g.SetProperty(op.Unit, op.Property, v)
}
