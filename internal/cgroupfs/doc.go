// Package cgroupfs is cgwarden's one door to the cgroup filesystem and the
// few proc and sys files it reads beside it.
//
// Every read and every write of a live node goes through Host, which
// resolves each path beneath an injected host root with openat2(2) and
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so a path can neither climb out of
// the root nor follow a symlink planted inside a cgroup directory. Writes are
// refused outside the cgroup mount points the caller declares. Errors are
// *fs.PathError values carrying the host path, so errors.Is(err,
// fs.ErrNotExist) works and every message says which file failed.
//
// Readers elsewhere consume the small FS interface, which a snapshot
// (package snapshot) implements too; that is what makes a snapshot replay
// exactly what a live scan read.
package cgroupfs
