package inventory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/procid"
	"github.com/cgwarden/cgwarden/internal/stats"
)

// ContainerPIDs is what a container runtime says of a running container:
// the host PID of its first process (a sandbox's: the pause process).
// podsource.CRISource answers it from the CRI's verbose status.
type ContainerPIDs interface {
	ContainerPID(ctx context.Context, id string, sandbox bool) (int, error)
}

// Evidence confirms that a misplaced cgroup holds the container its name
// claims, by what the container runtime did rather than by the name.
//
// The metadata check (Scanner.confirm, metadata.Set.Check) proves only
// that the pod has a container with that ID, not that this directory is
// where the runtime put it: anyone with a delegated cgroup subtree can
// make a second "<slice>:<prefix>:<id>" (or "cri-containerd-<id>.scope")
// with a real container's pod UID and ID, put processes of their own in
// it, and have them adopted into that pod (its limits, its accounting; a
// later revert moves the victim's processes out). So an adoption also
// needs one of these, in every hierarchy where the cgroup holds
// processes:
//
//   - the runtime's PID: the runtime (Runtime, the CRI) says the
//     container's first process is PID n, and n is in the cgroup;
//   - the runtime's parent: a process in the cgroup is a child of a
//     process that is also the parent of a process inside the pod's own
//     cgroup in the kubelet's tree (root's: no tenant puts processes
//     there). A pod's containers and its sandbox are children of one
//     runtime process (containerd's shim is one per pod and a
//     subreaper, runwasi's shims likewise; exec'd processes are its
//     children too), which no process outside the pod descends from.
//     PID 1 (where orphans go) and 0 vouch for nothing.
//
// Limits, without a CRI source (the API server or a pods file): a pod
// whose cgroup holds no process (runwasi's process-less sandbox, a
// sandbox misplaced with its containers) or whose runtime starts each
// container under a process of its own (CRI-O's conmon per container,
// cri-dockerd's shim per container) cannot be confirmed, and its
// misplaced containers are not adopted (the refusal says why). A process
// of the container's own user moved into a decoy on cgroup v1 (which lets
// an owner of the destination move any process of its euid) would carry
// the evidence with it; whoever can do that already controls the
// container's processes.
type Evidence struct {
	// FS reads the live host's /proc and cgroup files.
	FS cgroupfs.FS
	// Runtime, when set, gives a running container's PID; nil when the
	// pod metadata is not the CRI's.
	Runtime ContainerPIDs
	// Timeout bounds one question to the runtime (2 s if 0).
	Timeout time.Duration
}

// maxEvidenceProcs bounds the processes whose parents are read, per pod
// and per cgroup checked: the runtime's children come first in a
// container's list, and a pod with thousands of processes must not make
// each adoption read thousands of /proc files.
const maxEvidenceProcs = 256

// Confirm reports whether the runtime put container c of pod p in dirs
// (the cgroup's directory in each managed hierarchy, host paths; those
// that do not exist or hold no process are passed over). When it did
// not, why says what was looked for and not found, naming the directory.
// n is the scan the cgroups come from (its Tree is where p's cgroup is
// read).
func (ev *Evidence) Confirm(n *Node, p *Pod, c *Container, dirs []string) (ok bool, why string) {
	var runtimePID int
	var runtimeErr error
	if ev.Runtime != nil {
		timeout := ev.Timeout
		if timeout <= 0 {
			timeout = 2 * time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		runtimePID, runtimeErr = ev.Runtime.ContainerPID(ctx, c.ID, c.Sandbox)
		cancel()
	}
	var parents map[int]bool
	for _, d := range dirs {
		pids, err := readPIDs(ev.FS, path.Join(d, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) || err == nil && len(pids) == 0 {
			continue
		}
		if err != nil {
			return false, fmt.Sprintf("%s is not moved: its processes cannot be read to confirm it is container %s's: %v", d, layout.ShortID(c.ID), err)
		}
		if runtimePID > 0 && slices.Contains(pids, runtimePID) {
			continue
		}
		if parents == nil {
			parents = ev.podParents(n, p)
		}
		if ev.childOf(pids, parents) {
			continue
		}
		return false, ev.refusal(d, c, runtimePID, runtimeErr, parents)
	}
	return true, ""
}

// refusal says why dir was not confirmed as container c's.
func (ev *Evidence) refusal(dir string, c *Container, runtimePID int, runtimeErr error, parents map[int]bool) string {
	var saw []string
	switch {
	case ev.Runtime == nil:
		saw = append(saw, "no CRI runtime to ask for the container's PID (the pod metadata is not the CRI's)")
	case runtimeErr != nil:
		saw = append(saw, "the runtime gave no PID for it: "+runtimeErr.Error())
	default:
		saw = append(saw, fmt.Sprintf("the runtime's PID for it, %d, is not there", runtimePID))
	}
	if len(parents) == 0 {
		saw = append(saw, "the pod's cgroup holds no process whose parent (the runtime's) could vouch for it")
	} else {
		saw = append(saw, fmt.Sprintf("none of its processes is a child of the processes that started the pod's own (%s)",
			joinInts(slices.Sorted(maps.Keys(parents)), 8)))
	}
	return fmt.Sprintf("%s is not moved: only its name says it holds container %s, the runtime does not confirm it (a decoy?): %s",
		dir, layout.ShortID(c.ID), strings.Join(saw, "; "))
}

// podParents are the parents of the processes in p's own cgroup and below
// it in the kubelet's tree (n.Tree), PID 1 and 0 left out.
func (ev *Evidence) podParents(n *Node, p *Pod) map[int]bool {
	out := map[int]bool{}
	if p.Cgroup == nil {
		return out
	}
	read := 0
	var visit func(cg *Cgroup)
	visit = func(cg *Cgroup) {
		if read >= maxEvidenceProcs {
			return
		}
		pids, _ := readPIDs(ev.FS, path.Join(n.Tree, cg.Path, "cgroup.procs"))
		for _, pid := range pids {
			if read >= maxEvidenceProcs {
				return
			}
			read++
			if st, err := procid.Read(ev.FS, pid); err == nil && st.PPID > 1 {
				out[st.PPID] = true
			}
		}
		for _, ch := range cg.Children {
			visit(ch)
		}
	}
	visit(p.Cgroup)
	return out
}

// childOf reports whether one of pids (the first maxEvidenceProcs) has its
// parent in parents.
func (ev *Evidence) childOf(pids []int, parents map[int]bool) bool {
	if len(parents) == 0 {
		return false
	}
	for i, pid := range pids {
		if i >= maxEvidenceProcs {
			return false
		}
		if st, err := procid.Read(ev.FS, pid); err == nil && parents[st.PPID] {
			return true
		}
	}
	return false
}

// readPIDs reads a cgroup.procs file.
func readPIDs(fsys cgroupfs.FS, file string) ([]int, error) {
	b, err := fsys.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pids, err := stats.ParsePIDs(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return pids, nil
}

func joinInts(v []int, max int) string {
	var s []string
	for i, x := range v {
		if i == max {
			s = append(s, fmt.Sprintf("and %d more", len(v)-max))
			break
		}
		s = append(s, strconv.Itoa(x))
	}
	return strings.Join(s, ", ")
}
