// Command vmexec runs test binaries in scripts/vmtest's QEMU guests, as
// `go test -exec` (the v2 lane, the systemd guest, the systemd node;
// docs/testing.md). One binary, two roles:
//
//	vmexec [-listen :7711] guest
//
// is the guest's daemon: scripts/vmtest.d/init starts it in the busybox
// guest, scripts/vmtest.d/systemd/vmtest.service in the systemd guests,
// behind QEMU's user network (the host's 127.0.0.1:PORT forwarded to it).
// Each connection brings one job: a test binary, which it writes to /tmp
// and runs from /src/<the package's directory> (where the tree's
// non-Go files are) with CGWARDEN_REQUIRE_REAL=1 and stdin /dev/null,
// streaming its output back as it comes, then its exit status. A binary
// still running past the job's limit is stuck: the daemon shows why (its
// tasks' state, kernel stacks and wait channels, every task in
// uninterruptible sleep, the kernel's blocked tasks by sysrq w), then
// kills it and everything it started. A poweroff job ends the daemon,
// and its starter powers the guest off.
//
//	vmexec -addr 127.0.0.1:PORT -root REPO -limit SECONDS -silence DURATION [-down FILE] BINARY ARGS...
//
// is the host's side, as go test runs it: go test -exec "vmexec -addr ...
// -root ..." runs it with the test binary and its arguments, from the
// package's source directory. It sends the binary to the guest, copies
// the guest's output to its stdout byte for byte (go test's test2json
// reads it) and exits with the binary's status. A guest that says nothing
// for the silence bound has stalled, and one whose connection drops
// before the status has gone away: either is said in a line of the output
// and the exit status is 1; -down records it, so the packages after it
// fail at once instead of waiting on a dead guest. A -test.run that
// selects none of the binary's tests (it lists them on the host with
// -test.list) is answered here as the binary would answer it ("no tests
// to run", PASS) without a guest: the systemd guests run -test.run
// Systemd over every real-kernel package, half of which have none.
//
//	vmexec -addr 127.0.0.1:PORT [-silence DURATION] ping|poweroff
//
// asks the daemon whether it is up (scripts/vmtest waits for it before
// go test starts), or to power the guest off.
//
// The wire format (frame.go) is frames of a kind byte, a 4-byte length
// and a payload: the host sends a job frame (a JSON header) and then the
// binary's bytes; the guest answers with output frames and one exit
// frame. Only loopback addresses are dialled: the daemon runs whatever
// it is sent, as root.
package main
