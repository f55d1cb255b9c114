package sizer

import (
	"testing"
	"time"
)

// Ten changes inside the window make one due point, Window after the last
// change, carrying the last change's time; a change after that starts a new
// burst.
func TestDebounceIsTrailing(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := debounce{Window: time.Second, MaxDelay: 10 * time.Second}
	var last time.Time
	for i := range 10 {
		last = t0.Add(time.Duration(i) * 100 * time.Millisecond)
		d.changed("ns/vm", last)
	}
	if wait, _ := d.due("ns/vm", t0.Add(1500*time.Millisecond)); wait != 400*time.Millisecond {
		t.Fatalf("0.6 s after the last change: wait %v, want 400ms (trailing, not leading)", wait)
	}
	wait, at := d.due("ns/vm", last.Add(time.Second))
	if wait != 0 || !at.Equal(last) {
		t.Fatalf("a window after the last change: wait %v, last %v; want due, %v", wait, at, last)
	}
	if wait, at := d.due("ns/vm", last.Add(2*time.Second)); wait != 0 || !at.IsZero() {
		t.Fatalf("after it was due: wait %v last %v, want due with no pending change", wait, at)
	}
	if d.pending() != 0 {
		t.Fatalf("%d bursts pending, want 0", d.pending())
	}
}

// A VM that never stops changing is still due MaxDelay after its first
// change.
func TestDebounceMaxDelay(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := debounce{Window: time.Second, MaxDelay: 3 * time.Second}
	for i := range 40 {
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		d.changed("ns/vm", now)
		wait, last := d.due("ns/vm", now)
		if i < 30 && wait <= 0 {
			t.Fatalf("change %d at +%v: due already", i, now.Sub(t0))
		}
		if i == 30 {
			if wait != 0 || !last.Equal(now) {
				t.Fatalf("at +3 s of changes every 100 ms: wait %v, want due (max delay)", wait)
			}
			return
		}
	}
}

// A pod update with no pending VM change is due at once; forget drops a
// burst.
func TestDebounceNoChangeAndForget(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := debounce{Window: time.Second}
	if wait, last := d.due("ns/vm", t0); wait != 0 || !last.IsZero() {
		t.Fatalf("no change: wait %v last %v", wait, last)
	}
	d.changed("ns/vm", t0)
	d.forget("ns/vm")
	if wait, _ := d.due("ns/vm", t0); wait != 0 {
		t.Fatalf("after forget: wait %v, want 0", wait)
	}
}

// One Event per key per window; other keys are independent; the map is
// swept so it does not keep keys of long-gone windows.
func TestEventLimit(t *testing.T) {
	t0 := time.Unix(1000, 0)
	e := eventLimit{Window: time.Minute}
	if !e.allow("u1/CPUResized", t0) {
		t.Fatal("first event refused")
	}
	if e.allow("u1/CPUResized", t0.Add(59*time.Second)) {
		t.Fatal("second event inside the window allowed")
	}
	if !e.allow("u1/CPUResizePending", t0.Add(time.Second)) || !e.allow("u2/CPUResized", t0.Add(time.Second)) {
		t.Fatal("another reason or pod refused")
	}
	if !e.allow("u1/CPUResized", t0.Add(61*time.Second)) {
		t.Fatal("after the window: refused")
	}
	for i := range 5000 {
		e.allow(string(rune('a'+i%26))+time.Duration(i).String(), t0.Add(time.Duration(2+i)*time.Minute))
	}
	if n := len(e.last); n > 10 {
		t.Fatalf("%d keys kept for one-minute windows of one key per minute; want a handful", n)
	}
}

func TestWithMinStep(t *testing.T) {
	resize := func(from, to int64) ResizeDecision {
		return ResizeDecision{Action: ActResize, Container: "c", From: from, To: to}
	}
	for _, c := range []struct {
		name        string
		d           ResizeDecision
		step, limit int64
		want        Action
	}{
		{"no step", resize(1000, 1010), 0, 0, ActResize},
		{"below, up", resize(1000, 1099), 100, 0, ActNone},
		{"below, down", resize(1000, 901), 100, 0, ActNone},
		{"at the step", resize(1000, 1100), 100, 0, ActResize},
		{"below but to the node's cap", resize(3950, 4000), 100, 4000, ActResize},
		{"below but to the namespace's bound (the lower cap)", resize(1950, 2000), 100, 2000, ActResize},
		{"not a resize", ResizeDecision{Action: ActPending, From: 1000, To: 1000}, 100, 0, ActPending},
	} {
		got := WithMinStep(c.d, c.step, c.limit)
		if got.Action != c.want {
			t.Errorf("%s: %s (%s), want %s", c.name, got.Action, got.Reason, c.want)
		}
		if got.Action == ActNone && got.Reason == "" {
			t.Errorf("%s: no reason given", c.name)
		}
	}
}
