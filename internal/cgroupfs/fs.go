package cgroupfs

import "time"

// FS is the read side of a node's filesystem as cgwarden sees it. Paths are
// absolute host paths ("/sys/fs/cgroup/cpu/kubepods/cpu.shares").
type FS interface {
	// ReadFile returns the whole content of a file.
	ReadFile(path string) ([]byte, error)
	// ReadDirs returns the names of the subdirectories of a directory,
	// sorted; files are left out.
	ReadDirs(path string) ([]string, error)
}

// Writer is the write side, implemented only by the live Host.
type Writer interface {
	// WriteFile writes data to an existing cgroup file.
	WriteFile(path string, data []byte) error
	// Mkdir creates one cgroup directory.
	Mkdir(path string) error
	// Rmdir removes one empty cgroup directory.
	Rmdir(path string) error
}

// Sample is a node's filesystem as it was at one instant: the live host
// now, or one sample of a snapshot.
type Sample struct {
	FS   FS
	Time time.Time
}
