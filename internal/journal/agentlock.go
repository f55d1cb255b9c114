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

// ErrAgentLocked is returned by TryAgentLock when another process holds
// the agent lock.
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

// Release drops the lock.
func (l *AgentLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
