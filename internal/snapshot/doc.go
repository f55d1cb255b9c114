// Package snapshot captures everything cgwarden reads from a node into one
// portable text file, and serves it back as a cgroupfs.FS so that every
// read command works from the file exactly as it did on the node.
//
// The file is a txtar archive (golang.org/x/tools/txtar, chosen because it
// is plain text a person can read, diff and attach to a bug report): a
// header of "key: value" lines, then one section per file named by its
// host path. A directory with no file inside is a section whose name ends
// in "/". A snapshot holds up to two samples of the node: the second
// sample's files, for CPU rates, are sections named "next:<path>" and hold
// only the files whose content changed; a cgroup made between the samples
// is a "next:<dir>/" section (beside its new files), one removed is a
// "next-gone:<dir>/" section, so the second sample replays the tree as it
// was then. A file that exists but could not be read is a "failed:<path>"
// (or "next-failed:<path>") section holding the error, so a replay fails
// where the node did instead of calling the file missing.
//
// A snapshot proves it is whole: its header holds "seal: sha256" and its
// last section, "cgwarden-end", the count of the sections before it and
// the SHA-256 of every byte before its marker line. A sealed file cut
// short (the end is gone), edited (the checksum differs) or with sections
// added after its end is refused, instead of replaying as a smaller node
// with nothing wrong in it. A file without the seal header (written before
// sealing existed) loads with Snapshot.Sealed false, for callers to warn.
//
// Loading treats the file as hostile: its size, the number and length of
// names, and every path are checked (absolute, clean, no "..", beneath a
// cgroup mount point named by the snapshot's own mountinfo or one of the
// few proc and sys files cgwarden reads); anything else is a precise error.
package snapshot
