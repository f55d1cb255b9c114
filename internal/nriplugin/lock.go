package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A runtime registers every NRI plugin that connects, by any name, and
// calls each in index order; two that set one container's cgroupsPath
// (and the annotation that records it) fail its creation ("plugins ...
// both tried to set":
// containerd/nri pkg/adaptation, result.go adjustCgroupsPath and
// pkg/api/owners.go, which counts a second plugin of the same name as a
// conflict too). A DaemonSet update with maxSurge runs the old and the
// new pod's plugin on one node at once, so the plugin registers only
// while it holds the node's plugin lock: a flock on the lock directory
// itself (the journal directory, mounted read-only: a flock needs no
// write access and no file made beforehand).

// lockRetry bounds how often a waiting plugin tries the lock again (as
// the agent's lock): the handover leaves containers unplaced for at most
// about this long.
const lockRetry = time.Second

// errPluginLocked says another process holds the plugin lock.
var errPluginLocked = errors.New("another cgwarden nri plugin is registered with the runtime on this node")

// tryPluginLock takes the plugin lock of dir without waiting; release
// lets it go (so does the process's exit).
func tryPluginLock(dir string) (release func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("plugin lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (lock on %s)", errPluginLocked, dir)
		}
		return nil, fmt.Errorf("plugin lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// waitPluginLock takes the plugin lock of dir, trying again every retry
// while another plugin holds it (logged once when the wait begins and
// once when it ends); release is nil when ctx ended first.
func waitPluginLock(ctx context.Context, dir string, retry time.Duration, log *slog.Logger) (release func()) {
	var since time.Time
	for {
		release, err := tryPluginLock(dir)
		switch {
		case err == nil:
			if !since.IsZero() {
				log.Info("took the node's NRI plugin lock: registering", "waited", time.Since(since).Round(time.Millisecond))
			}
			return release
		case since.IsZero():
			since = time.Now()
			log.Warn("not registering with the runtime until the other plugin stops (a DaemonSet update with maxSurge): waiting", "err", err, "retry", retry)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}
