// Command usec-shim is the cluster lane's stand-in for seed 003's runwasi
// shim as the kubelet saw it: a containerd shim v2 in front of
// containerd-shim-runc-v2 that passes every call through, but answers
// Task.Stats with the container's CPU in microseconds where containerd
// reads nanoseconds. That is what the shim of the seed's stacks did
// (docs/findings.md, "Why `kubectl top` was static on seed 003's stack"):
// rust-extensions' collect_metrics put cgroup v2's usage_usec, user_usec
// and system_usec in the cgroup v1 message's total, user and kernel,
// whose unit is the nanosecond, and containerd's CRI passes a v1 total
// through unchanged. On the lane's cgroup v1 nodes runc's shim reports
// nanoseconds in that message, so this divides them by 1000: the
// figures the seed's shim gave on cgroup v2.
//
// containerd runs it by runtime_path, with the arguments it gives any
// shim. "start" runs the real shim's start, then serves a socket of its
// own in front of the real one (a process started as "usec-shim serve
// UPSTREAM LISTEN", one per real shim) and answers with that socket's
// address; every other action is the real shim's. Written here, not
// taken from a library: no library proxies a shim's ttrpc.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// realShim is the shim this one fronts, looked up on PATH (containerd's
// environment, which the lane's containerd gets with its own directory
// first).
const realShim = "containerd-shim-runc-v2"

func main() {
	if len(os.Args) == 4 && os.Args[1] == "serve" {
		if err := serve(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, "usec-shim:", err)
			os.Exit(1)
		}
		return
	}
	real, err := exec.LookPath(realShim)
	if err != nil {
		fmt.Fprintln(os.Stderr, "usec-shim:", err)
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[len(os.Args)-1] == "start" {
		if err := start(real); err != nil {
			fmt.Fprintln(os.Stderr, "usec-shim:", err)
			os.Exit(1)
		}
		return
	}
	err = syscall.Exec(real, append([]string{real}, os.Args[1:]...), os.Environ())
	fmt.Fprintln(os.Stderr, "usec-shim: exec", real+":", err)
	os.Exit(1)
}
