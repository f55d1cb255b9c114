package sizer

import (
	"sync"
	"time"
)

// debounce is a trailing debounce per key: a key is due Window after its
// last change, but never later than MaxDelay after the first change of a
// burst, so a VM whose size moves every second is still resized, to the
// size it has when it is due. client-go's delaying queue cannot do this by
// itself: AddAfter for a key already waiting keeps the earlier time (a
// leading window), so the controller asks debounce, when a key comes out
// of the queue, whether it is really due and puts it back if not.
type debounce struct {
	Window, MaxDelay time.Duration

	mu    sync.Mutex
	burst map[string]burst
}

// burst is one key's pending changes: when the first and the last came.
type burst struct{ first, last time.Time }

// changed records a change of key at now.
func (d *debounce) changed(key string, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.burst == nil {
		d.burst = map[string]burst{}
	}
	b, ok := d.burst[key]
	if !ok {
		b.first = now
	}
	b.last = now
	d.burst[key] = b
}

// due says whether key may be acted on at now, and if not, how long to
// wait. A key with no pending change is due (a pod's own update). When due,
// it returns the time of the burst's last change (zero for none) and forgets
// the burst: a change after this call starts a new one.
func (d *debounce) due(key string, now time.Time) (wait time.Duration, last time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.burst[key]
	if !ok {
		return 0, time.Time{}
	}
	at := b.last.Add(d.Window)
	if d.MaxDelay > 0 {
		if limit := b.first.Add(d.MaxDelay); limit.Before(at) {
			at = limit
		}
	}
	if now.Before(at) {
		return at.Sub(now), time.Time{}
	}
	delete(d.burst, key)
	return 0, b.last
}

// forget drops key's pending burst (its VM is gone).
func (d *debounce) forget(key string) {
	d.mu.Lock()
	delete(d.burst, key)
	d.mu.Unlock()
}

// pending is how many keys have a burst waiting.
func (d *debounce) pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.burst)
}

// eventLimit lets one Event through per (object, reason) per Window and
// counts the rest: the sizer resizes a pod each time its VM changes, and
// NeonVM's autoscaler changes VMs every few seconds; an Event per resize
// would flood the API server and client-go's event cache (4,096 entries).
type eventLimit struct {
	Window time.Duration

	mu    sync.Mutex
	last  map[string]time.Time
	swept time.Time
}

// allow reports whether an Event for key may be sent at now, and records it.
// Entries older than Window are swept once per Window, so the map holds the
// keys of at most two windows and each call costs O(1) amortised.
func (e *eventLimit) allow(key string, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last == nil {
		e.last = map[string]time.Time{}
	}
	if t, ok := e.last[key]; ok && now.Sub(t) < e.Window {
		return false
	}
	if now.Sub(e.swept) >= e.Window {
		e.swept = now
		for k, t := range e.last {
			if now.Sub(t) >= e.Window {
				delete(e.last, k)
			}
		}
	}
	e.last[key] = now
	return true
}
