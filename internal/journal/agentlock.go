package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// AgentLockName is the file in the journal directory whose flock a
// fixing agent (`serve --fix`) holds for as long as it fixes. The
// journal's own lock (LockName) is taken for one run at a time, so two
// agents on one node — a DaemonSet update with maxSurge, a second agent
// started by hand — would take turns with it and each write its own
// targets between the other's: alternating writes. The agent lock makes
// the second one wait, serving but not fixing, until the first is gone.
const AgentLockName = "agent.lock"

// The agent lock excludes only agents that share a journal directory: two
// agents given different --journal-dir would both take their own. So a
// fixing agent first takes the node lock (TryNodeLock), a flock on a
// directory every agent on the node reaches as the same inode: the
// kubelet's root cgroup. The agent lock is still taken after it: agents
// that share a journal directory but see different trees (another host
// root or scan base: an embedder, a test) would otherwise both write one
// journal, and each compact away the other's steps as gone.

// ErrAgentLocked is returned by TryAgentLock and TryNodeLock when another
// process holds the lock.
var ErrAgentLocked = errors.New("another cgwarden agent fixes this node")

// AgentLock is a held agent lock; Release lets the next agent in (so does
// the holder's exit, however it ends: the kernel drops a flock with its
// last descriptor).
type AgentLock struct {
	f *os.File
}

// TryAgentLock takes dir's agent lock without waiting and writes who
// (what a waiting agent logs about the holder) into the lock file. When
// another process holds it, the error wraps ErrAgentLocked and says what
// the holder wrote.
func TryAgentLock(dir, who string) (*AgentLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("agent lock: %w", err)
	}
	name := filepath.Join(dir, AgentLockName)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("agent lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := "unknown"
			if b, rerr := os.ReadFile(name); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
				holder = strings.TrimSpace(string(b))
			}
			return nil, fmt.Errorf("%w (lock %s held by %s)", ErrAgentLocked, name, holder)
		}
		return nil, fmt.Errorf("agent lock %s: %w", name, err)
	}
	// Who holds it is information for the next agent's log, not state: a
	// failed write loses nothing.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(who+"\n"), 0)
	}
	return &AgentLock{f: f}, nil
}

// TryNodeLock takes, without waiting, the flock of dir: an open directory
// that every agent on the node reaches as the same inode, whatever its
// journal directory, container or mount (the agent's is the kubelet's root
// cgroup in the hierarchy it scans, opened through its host door). The
// lock holds dir open until Release; dir is closed when the lock is not
// taken, and the error wraps ErrAgentLocked when another process holds it.
//
// flock(2) works on cgroupfs directories: measured on this project's
// machine (kernel 6.18, cgroup v1 cpu hierarchy), a LOCK_EX|LOCK_NB on a
// cgroup directory succeeds, a second open of the same directory is
// refused (EWOULDBLOCK), so is an open of it through a second mount of the
// same hierarchy (same superblock, same inode), and the second takes it
// once the first descriptor is closed. The lock is the kernel's, on the
// inode: nothing is written to the cgroup.
func TryNodeLock(dir *os.File) (*AgentLock, error) {
	if err := unix.Flock(int(dir.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		dir.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (node lock: flock on %s held; the holder names itself in its journal directory's %s)", ErrAgentLocked, dir.Name(), AgentLockName)
		}
		return nil, fmt.Errorf("node lock %s: %w", dir.Name(), err)
	}
	return &AgentLock{f: dir}, nil
}

// Release drops the lock.
func (l *AgentLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
