// Package procid tells a process from a later one that got the same PID.
//
// A PID names a process only while it runs: once it has exited the kernel
// may hand the number to any new process, and after a reboot every PID
// names someone else. What cgwarden records of a process it moves (the
// journal) is therefore its PID with its start time (field 22 of
// /proc/<pid>/stat, clock ticks after boot: fixed for the process's life)
// and the node's boot ID (/proc/sys/kernel/random/boot_id, new at every
// boot). A PID whose start time or boot differs from the recorded one is a
// different process.
//
// Parsers (ParseStat, ParseBootID) take text and are fuzzed; the readers
// (Start, Boot) read through the caller's filesystem door
// (cgroupfs.FS), beneath its injected host root.
package procid
