package poll

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// call, as testing's does with runtime.Goexit: here by a panic with
// fatal, which run recovers.
type recorder struct {
	testing.TB
	msg string
}

type fatal struct{}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(fatal{})
}

// run calls wait with a recorder and returns what its Fatalf said, or ""
// when wait returned.
func run(t *testing.T, wait func(testing.TB)) string {
	t.Helper()
	r := &recorder{}
	func() {
		defer func() {
			if v := recover(); v != nil {
				if _, ok := v.(fatal); !ok {
					panic(v)
				}
			}
		}()
		wait(r)
	}()
	return r.msg
}

func TestUntilReturnsWhenDone(t *testing.T) {
	calls := 0
	msg := run(t, func(tb testing.TB) {
		Every(time.Millisecond).Until(tb, 10*time.Second, "three calls", func() (bool, string, error) {
			calls++
			return calls == 3, fmt.Sprintf("%d calls", calls), nil
		})
	})
	if msg != "" || calls != 3 {
		t.Errorf("failed with %q after %d calls; want no failure after 3", msg, calls)
	}
}

func TestUntilTimeoutNamesWhatAndLastState(t *testing.T) {
	calls := 0
	returned := false
	msg := run(t, func(tb testing.TB) {
		Every(time.Millisecond).Until(tb, 20*time.Millisecond, "the pods Running", func() (bool, string, error) {
			calls++
			return false, fmt.Sprintf("%d of 5 Running", calls), nil
		})
		returned = true
	})
	// The last state is the last call's: none after the failure.
	if want := fmt.Sprintf("the pods Running: not after 20ms; last: %d of 5 Running", calls); msg != want {
		t.Errorf("failed with %q; want %q", msg, want)
	}
	if calls < 2 || returned {
		t.Errorf("%d calls, returned after failing: %v; want at least 2 calls, and no return", calls, returned)
	}
}

func TestUntilErrorFailsAtOnce(t *testing.T) {
	calls := 0
	msg := run(t, func(tb testing.TB) {
		Every(time.Millisecond).Until(tb, time.Minute, "the sizer serving", func() (bool, string, error) {
			calls++
			return false, "", errors.New("the sizer exited")
		})
	})
	if msg != "the sizer serving: the sizer exited" || calls != 1 {
		t.Errorf("failed with %q after %d calls; want %q after 1", msg, calls, "the sizer serving: the sizer exited")
	}
}

func TestUntilTrue(t *testing.T) {
	calls := 0
	if msg := run(t, func(tb testing.TB) {
		Every(time.Millisecond).UntilTrue(tb, 10*time.Second, "true", func() bool { calls++; return calls == 2 })
	}); msg != "" || calls != 2 {
		t.Errorf("failed with %q after %d calls; want no failure after 2", msg, calls)
	}
	msg := run(t, func(tb testing.TB) {
		Every(time.Millisecond).UntilTrue(tb, 5*time.Millisecond, "never", func() bool { return false })
	})
	if msg != "never: not after 5ms" {
		t.Errorf("failed with %q; want %q", msg, "never: not after 5ms")
	}
}

// The package's Until and UntilTrue call at once: a condition that
// already holds costs no Interval.
func TestUntilCallsAtOnce(t *testing.T) {
	start := time.Now()
	Until(t, time.Minute, "at once", func() (bool, string, error) { return true, "", nil })
	UntilTrue(t, time.Minute, "at once", func() bool { return true })
	if d := time.Since(start); d >= Interval {
		t.Errorf("a condition that held at once took %v", d)
	}
	if !strings.HasPrefix(run(t, func(tb testing.TB) {
		Until(tb, 0, "zero", func() (bool, string, error) { return false, "no", nil })
	}), "zero: not after 0s") {
		t.Error("a zero timeout did not fail after the first call")
	}
}
