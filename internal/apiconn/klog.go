package apiconn

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// FoldWindow is how long a client-go message is not written again.
const FoldWindow = 10 * time.Minute

// RouteKlog sends client-go's log (klog, which is process-wide: call it
// once, from the command that runs the clients) to log as
// component=client-go, through Fold.
func RouteKlog(log *slog.Logger, r *Reach) {
	klog.SetSlogLogger(slog.New(NewFold(log.Handler(), r, FoldWindow, time.Now)).With("component", "client-go"))
}

// Fold is a slog.Handler that writes a message (its level, text and
// attributes but the error and the object) at most once per window, the
// next time with the number of repeats folded into it; while r (may be
// nil) says the API server is away, it writes nothing.
type Fold struct {
	next   slog.Handler
	reach  *Reach
	window time.Duration
	now    func() time.Time
	st     *foldState
}

type foldState struct {
	mu     sync.Mutex
	last   map[string]time.Time
	folded map[string]int
}

// NewFold folds what goes to next.
func NewFold(next slog.Handler, r *Reach, window time.Duration, now func() time.Time) *Fold {
	return &Fold{next: next, reach: r, window: window, now: now,
		st: &foldState{last: map[string]time.Time{}, folded: map[string]int{}}}
}

// Enabled implements slog.Handler.
func (f *Fold) Enabled(ctx context.Context, l slog.Level) bool { return f.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (f *Fold) Handle(ctx context.Context, rec slog.Record) error {
	if f.reach != nil && f.reach.drop() {
		return nil
	}
	key := foldKey(rec)
	now := f.now()
	s := f.st
	s.mu.Lock()
	if t, ok := s.last[key]; ok && now.Sub(t) < f.window {
		s.folded[key]++
		s.mu.Unlock()
		return nil
	}
	n := s.folded[key]
	delete(s.folded, key)
	s.last[key] = now
	if len(s.last) > 1000 {
		for k, t := range s.last {
			if now.Sub(t) >= f.window {
				delete(s.last, k)
				delete(s.folded, k)
			}
		}
	}
	s.mu.Unlock()
	if n > 0 {
		rec = rec.Clone()
		rec.AddAttrs(slog.Int("repeatsFolded", n))
	}
	return f.next.Handle(ctx, rec)
}

// foldKey is what makes two records the same message: level, text and
// attributes, except those that differ at every repeat (the error text
// carries resource versions; an Event differs in its timestamps).
func foldKey(rec slog.Record) string {
	var attrs []string
	rec.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "err", "error", "event", "object":
		default:
			attrs = append(attrs, a.Key+"="+a.Value.String())
		}
		return true
	})
	sort.Strings(attrs)
	return rec.Level.String() + " " + rec.Message + " " + strings.Join(attrs, " ")
}

// WithAttrs implements slog.Handler; the fold state is shared.
func (f *Fold) WithAttrs(as []slog.Attr) slog.Handler {
	g := *f
	g.next = f.next.WithAttrs(as)
	return &g
}

// WithGroup implements slog.Handler; the fold state is shared.
func (f *Fold) WithGroup(name string) slog.Handler {
	g := *f
	g.next = f.next.WithGroup(name)
	return &g
}
