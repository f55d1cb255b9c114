package poll

import (
	"testing"
	"time"
)

// Interval is how long Until and UntilTrue wait between two calls of
// their condition.
const Interval = time.Second

// Poller calls a condition every interval; Every makes one.
type Poller struct {
	interval time.Duration
}

// Every returns a Poller that calls its condition every interval.
func Every(interval time.Duration) Poller {
	return Poller{interval: interval}
}

// Until calls f at once and then every Interval until it is done. An
// error from f fails t at once (t.Fatalf: what, the error); f not done
// after timeout fails t naming what, timeout and the state f last
// described.
func Until(t testing.TB, timeout time.Duration, what string, f func() (done bool, state string, err error)) {
	t.Helper()
	Every(Interval).Until(t, timeout, what, f)
}

// UntilTrue calls f at once and then every Interval until it returns
// true, and fails t naming what and timeout if it has not after timeout.
func UntilTrue(t testing.TB, timeout time.Duration, what string, f func() bool) {
	t.Helper()
	Every(Interval).UntilTrue(t, timeout, what, f)
}

// Until is the package's Until with p's interval.
func (p Poller) Until(t testing.TB, timeout time.Duration, what string, f func() (done bool, state string, err error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, state, err := f()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v; last: %s", what, timeout, state)
		}
		time.Sleep(p.interval)
	}
}

// UntilTrue is the package's UntilTrue with p's interval.
func (p Poller) UntilTrue(t testing.TB, timeout time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, timeout)
		}
		time.Sleep(p.interval)
	}
}
