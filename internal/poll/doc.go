// Package poll is test support: waiting, within a bound, for a condition
// to hold. A test that waits says what it waits for, and when the bound
// passes it fails naming that, the bound and the last state the condition
// described ("3 of 5 Running"), not a bare timeout; an error the
// condition returns fails the test at once.
//
// Until and UntilTrue call the condition at once and then every second,
// as the cluster and scale lanes poll an API server; Every(d) polls
// every d instead, for a test whose condition is in the test's own
// process or on this machine's cgroups (milliseconds, not seconds).
//
// A wait that must go on after the condition first holds, or that
// measures something over a fixed window, is not a poll: it stays a loop
// of its own.
//
// No binary imports this package (internal/deadcode's testSupport).
package poll
