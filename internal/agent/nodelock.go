package agent

import (
	"errors"
	"path"

	"github.com/cgwarden/cgwarden/internal/journal"
)

// nodeLocks are what a fixing agent holds for as long as it fixes: the
// node lock, a flock on the kubelet's root cgroup in the hierarchy the
// agent scans (journal.TryNodeLock), which every agent on the node reaches
// as one inode whatever its --journal-dir; then the agent lock of its
// journal directory (journal.AgentLockName), which keeps one journal to
// one agent even between agents whose trees differ. Taken in that order,
// each without waiting, and both let go when either is refused: two
// agents never hold one each.
type nodeLocks struct {
	node, journal *journal.AgentLock
}

// tryNodeLocks takes both locks, or neither. The kubelet's root cgroup is
// the one of the loop's latest scan; before one found it, there is
// nothing to lock (nor to fix).
func (a *Agent) tryNodeLocks(who string) (*nodeLocks, error) {
	pic := a.Loop.Latest()
	if pic == nil || pic.Node == nil {
		return nil, errors.New("no scan of the node yet, so no kubelet root cgroup to take the node lock on")
	}
	if pic.Node.KubeRoot == nil {
		return nil, errors.New("no kubelet root cgroup (kubepods) found to take the node lock on")
	}
	dir, err := a.host.OpenDir(path.Join(pic.Node.Tree, pic.Node.KubeRoot.Path))
	if err != nil {
		return nil, err
	}
	node, err := journal.TryNodeLock(dir)
	if err != nil {
		return nil, err
	}
	jl, err := journal.TryAgentLock(a.cfg.JournalDir, who)
	if err != nil {
		_ = node.Release()
		return nil, err
	}
	return &nodeLocks{node: node, journal: jl}, nil
}

// Release lets both locks go, the journal directory's first.
func (l *nodeLocks) Release() error {
	return errors.Join(l.journal.Release(), l.node.Release())
}
