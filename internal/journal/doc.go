// Package journal is cgwarden's record of every cgroup change it makes,
// and what it needs to undo them: appended to, and compacted when it has
// grown.
//
// The journal is one file of JSON lines (journal.jsonl) in a directory
// that only root may read (default /var/lib/cgwarden). Before an operation
// is applied, an intent entry with the state it replaces is appended and
// fsync'd; after it, a done or failed entry. A crash between the two
// leaves an intent without an outcome: "in doubt", which the undo treats
// as possibly applied and settles by looking at the cgroup's current
// state. A torn last line (the disk filled mid-write, or power was lost)
// was never fsync'd, so the operation it announced was never started; it
// is cut off when the journal is next opened for writing.
//
// A lock file (flock) in the same directory keeps two cgwarden processes
// from applying or reverting at once; inside one process the writers
// share one Journal, whose Lock makes them wait for each other. A Journal
// kept between locks reads only what was appended since its last read.
// Applies groups the entries into runs, Owned tells which cgroups
// cgwarden created and still owns.
//
// A moved process is recorded with its start time, and a move's intent
// with the node's boot ID (Proc, Entry.Boot; read by package procid), so
// that a PID the kernel has handed to a new process since (or a reboot
// has) is never taken for the process cgwarden moved.
//
// Compact keeps what a revert still needs (the first value of each file
// written, the cgroups created, the moves that can be undone) and drops
// what is settled or superseded; Journal.Compact replaces the file with
// that, crash-safely (new file, fsync, rename, fsync of the directory).
// Compacting whenever the file doubles bounds it by the live state, not
// the history.
package journal
