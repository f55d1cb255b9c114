// Package demo shows, on the live kernel, the two bugs cgwarden exists
// for and what its fix does to them: seed 000 (VM pods of 1, 2 and 4
// CPUs in a BestEffort tier at the minimum weight, next to a Burstable
// pod) and seed 003 (a container cgroup a runtime put outside its pod).
//
// Run builds both layouts in a uniquely named scratch cgroup (in every v1
// hierarchy it needs, or in the unified one), starts real CPU burners and
// a memory user as child processes of cgwarden itself (the binary
// re-executed in a hidden child mode, pinned to one CPU), measures what
// each pod gets, audits the scratch, applies the fix through fix.Engine
// (Base = the scratch, a journal in a temporary directory), measures
// again, reverts, and removes everything it created — also when its
// context is cancelled (SIGINT, SIGTERM) or a step fails.
//
// Nothing outside the scratch is written: the cgroupfs.Host the demo
// uses may write only beneath the scratch in each hierarchy.
package demo
