// Package fix is the engine every cgwarden change goes through: it plans
// (package plan), journals (package journal), applies and reverts.
//
// Apply takes the journal's lock, scans the node, builds the plan, checks
// every operation against the plan's policy before the first one is
// applied, then for each operation reads the state it replaces, journals
// the intent (fsync'd), applies it through a guarded writer that checks
// the policy again for every single write, and journals the outcome. A
// run cut off by a crash is continued by the next Apply under the same
// run ID; operations are idempotent (a cgroup cgwarden created is reused,
// a value already in place is written again harmlessly, a move moves
// whatever is still in the source).
//
// Revert undoes the last run (or all of them), newest operation first.
// Every undo looks at the current state rather than trusting the journal
// alone, so an operation in doubt (announced but never settled) is undone
// if it happened and skipped if it did not. What cannot be undone (a
// process that exited, a cgroup the runtime removed) is reported.
//
// No path acts on a PID because the journal names it: an apply (a resumed
// one too) moves what is in the sources now, a revert what is in the
// targets cgwarden made. The journal's processes carry their start times
// and boot (journal.Proc), and a revert leaves, and reports, a process
// that holds a recorded PID but is not the process moved: started at
// another time, or in another boot.
//
// The engine takes its filesystem and its Base cgroup from the caller,
// like inventory.Scanner, so tests run it against a scratch tree on the
// live kernel.
package fix
