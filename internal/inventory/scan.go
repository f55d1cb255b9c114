package inventory

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/stats"
)

// Host files read besides the cgroup tree.
const (
	MountinfoPath = "/proc/self/mountinfo"
	CPUOnlinePath = "/sys/devices/system/cpu/online"
	// MeminfoPath gives the node's memory totals, which its root cgroup
	// lacks on v2 (no memory.current at the root).
	MeminfoPath = "/proc/meminfo"
)

// Scanner walks one node's cgroup tree.
type Scanner struct {
	FS      cgroupfs.FS
	Mounts  mounts.Table
	Places  mounts.Places
	Version mounts.Version
	CPUs    int
	// Base is the cgroup the walk starts from ("/" for the whole node;
	// tests point it at their scratch cgroup). Guarantees are computed as
	// if Base were the root and had all CPUs.
	Base string
	// Meta names pods and containers and attaches cgroups that only a
	// container ID or pod name identifies; may be nil.
	Meta *metadata.Set
	// Steady, when set (NewSteady), makes Scan a steady-state scan of a
	// live host: the same Node, from fewer reads.
	Steady *Steady
	// ProcsWhereUsed reads the process lists (cgroup.procs) only of the
	// cgroups whose process count something uses, and leaves Stats.Procs
	// unknown (nil) elsewhere: on an idle node most cgroups hold a
	// process, and on v1 each list is opened and read afresh at every
	// scan (a kept descriptor could serve a stale one). The counts used
	// are those below misplaced containers (leftover detection; the
	// audit's misplaced and escaped rules), unattached and foreign
	// cgroups, and the pods the metadata does not know when it knows
	// some (the audit's orphan rule); see readUsedProcs. The agent sets
	// it; a snapshot, replayed later with other metadata, records every
	// list, and so do the one-shot commands.
	ProcsWhereUsed bool
}

// Open reads the node's mounts and CPU count, and checks that the cgroup
// hierarchies the mounts name can be read. A piece of the host that is
// missing is named with the mount that provides it (under --host-root in a
// container, the DaemonSet's hostPath volumes).
func Open(fsys cgroupfs.FS) (*Scanner, error) {
	raw, err := fsys.ReadFile(MountinfoPath)
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w%s", err, missingHint(fsys, err, "/proc"))
	}
	table, err := mounts.Parse(string(raw))
	if err != nil {
		return nil, err
	}
	places, err := table.Places()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", MountinfoPath, err)
	}
	online, err := fsys.ReadFile(CPUOnlinePath)
	if err != nil {
		return nil, fmt.Errorf("reading CPU count: %w%s", err, missingHint(fsys, err, "/sys/devices/system/cpu"))
	}
	cpus, err := ParseCPUList(string(online))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CPUOnlinePath, err)
	}
	// On a live host (a snapshot records only what it holds), every
	// hierarchy the mounts name must be there.
	_, live := fsys.(interface{ Root() string })
	for _, pt := range []string{places.Unified, places.CPU, places.CPUAcct, places.Memory, places.Pids} {
		if !live || pt == "" || (places.V2 && pt != places.Unified) {
			continue
		}
		if _, err := fsys.ReadDirs(pt); err != nil {
			return nil, fmt.Errorf("reading the cgroup hierarchy %s: %w%s", pt, err, missingHint(fsys, err, "/sys/fs/cgroup"))
		}
	}
	return &Scanner{FS: fsys, Mounts: table, Places: places, Version: table.Version(), CPUs: cpus, Base: "/"}, nil
}

// missingHint says which host directory must be mounted where when a read
// found nothing.
func missingHint(fsys cgroupfs.FS, err error, hostDir string) string {
	if !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	root := "/"
	if r, ok := fsys.(interface{ Root() string }); ok {
		root = r.Root()
	}
	if root == "/" {
		return fmt.Sprintf(" (cgwarden reads the host's %s)", hostDir)
	}
	return fmt.Sprintf(" (with --host-root %s, the host's %s must be mounted at %s: the DaemonSet mounts it as a hostPath volume)",
		root, hostDir, path.Join(root, hostDir))
}

// ParseCPUList counts the CPUs of a list such as "0-3,5,7-8".
func ParseCPUList(text string) (int, error) {
	s := strings.TrimSpace(text)
	if s == "" {
		return 0, errors.New("empty CPU list")
	}
	// The kernel prints ascending, disjoint ranges; anything else (or a
	// range so wide that counting it would overflow) is not a CPU list.
	n, next := 0, 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < next {
			return 0, fmt.Errorf("bad CPU list %q", clip(s, 64))
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("bad CPU list %q", clip(s, 64))
			}
		}
		if b-a >= maxCPUs || n+(b-a+1) > maxCPUs {
			return 0, fmt.Errorf("absurd CPU list %q", clip(s, 64))
		}
		n += b - a + 1
		next = b + 1
	}
	return n, nil
}

// maxCPUs bounds a CPU list; Linux's NR_CPUS tops out at 8192.
const maxCPUs = 1 << 20

// MaxDepth bounds the walk; real trees are under 15 levels deep.
const MaxDepth = 64

// Scan walks the tree once and builds the node's picture. Only a failure
// to list the base cgroup is an error; anything below that vanishes or
// cannot be read is recorded in Node.Errors and left unknown.
func (s *Scanner) Scan(now time.Time) (*Node, error) {
	base := s.Base
	if base == "" {
		base = "/"
	}
	n := &Node{Time: now, Version: s.Version, CPUs: s.CPUs, Tree: s.Places.Tree()}
	r := stats.Reader{FS: s.FS, Places: s.Places, SkipProcs: s.ProcsWhereUsed}
	if s.Steady != nil {
		s.Steady.begin()
		defer s.Steady.end()
	}
	root := &Cgroup{Path: base, Identity: layout.Root()}
	if err := s.walk(n, r, root, 0, true); err != nil {
		return nil, err
	}
	n.Root = root
	s.assemble(n, r)
	s.guarantee(n)
	s.readMeminfo(n)
	return n, nil
}

// readMeminfo fills n.Meminfo. A host or snapshot without the file leaves
// it unknown; one that does not parse is a read error.
func (s *Scanner) readMeminfo(n *Node) {
	raw, err := s.FS.ReadFile(MeminfoPath)
	switch {
	case err == nil:
		mi, perr := stats.ParseMeminfo(string(raw))
		if perr != nil {
			n.Errors = append(n.Errors, &stats.FileError{Path: MeminfoPath, Err: perr})
			return
		}
		n.Meminfo = &mi
	case !errors.Is(err, fs.ErrNotExist):
		n.Errors = append(n.Errors, err)
	}
}

func (s *Scanner) walk(n *Node, r stats.Reader, c *Cgroup, depth int, isBase bool) error {
	n.Cgroups++
	names, err := s.listChildren(n.Tree, c.Path)
	if err != nil {
		if isBase {
			return fmt.Errorf("listing the cgroup tree: %w", err)
		}
		if errors.Is(err, fs.ErrNotExist) {
			c.Stats.Gone = true
			return nil
		}
		// Not listable (a permission, a resolve restriction) is not gone:
		// its own figures may still be read, and it keeps its place among
		// its siblings; only what is below it is unknown.
		n.Errors = append(n.Errors, err)
		var errs []error
		c.Stats, errs = s.readStats(r, c.Path, false)
		n.Errors = append(n.Errors, errs...)
		return nil
	}
	var errs []error
	// Threads directly in a non-leaf cgroup compete with its children on
	// v1, so their count is needed there (and only there).
	c.Stats, errs = s.readStats(r, c.Path, !s.Places.V2 && len(names) > 0 && !isBase)
	n.Errors = append(n.Errors, errs...)
	if depth >= MaxDepth {
		n.Errors = append(n.Errors, fmt.Errorf("%s: deeper than %d levels, not walked further", c.Path, MaxDepth))
		return nil
	}
	// Every child is named before any is walked, so the kubelet root
	// nearest the top wins: /kubepods is claimed before a kubepods.slice
	// nested in an earlier sibling (a test's scratch tree, a nested
	// cluster's) is met, whatever the names' order.
	c.Children = make([]*Cgroup, 0, len(names))
	for _, name := range names {
		ch := &Cgroup{Path: joinClean(c.Path, name), Parent: c}
		ch.Identity = s.childIdentity(ch.Path, c.Identity, name)
		if ch.Identity.Kind == layout.KubeRoot && n.KubeRoot == nil {
			n.KubeRoot, n.Driver = ch, ch.Identity.Driver
		} else if ch.Identity.Kind == layout.KubeRoot {
			// A second kubelet root (two kubelets?) is not guessed at.
			ch.Identity = layout.Identity{Kind: layout.Foreign, Shape: "second-kubepods-root"}
		}
		c.Children = append(c.Children, ch)
	}
	for _, ch := range c.Children {
		if err := s.walk(n, r, ch, depth+1, false); err != nil {
			return err
		}
	}
	return nil
}

// listChildren lists the child cgroups of cg in the walked hierarchy.
func (s *Scanner) listChildren(tree, cg string) ([]string, error) {
	if s.Steady != nil {
		return s.Steady.list(s.FS, tree, cg)
	}
	return s.FS.ReadDirs(joinClean(tree, cg))
}

// childIdentity is the identity of cgroup cg, the child name of a cgroup
// of identity parent.
func (s *Scanner) childIdentity(cg string, parent layout.Identity, name string) layout.Identity {
	if s.Steady != nil {
		return s.Steady.identity(cg, parent, name)
	}
	return layout.Child(parent, name)
}

// readStats reads the Stats of cg.
func (s *Scanner) readStats(r stats.Reader, cg string, withThreads bool) (stats.Stats, []error) {
	if s.Steady != nil {
		return s.Steady.read(r, cg, withThreads)
	}
	return r.Read(cg, withThreads)
}

// joinClean is path.Join(dir, rel) for the walk's paths. When dir is a
// clean absolute path other than "/" and rel a clean path or a plain name,
// it is one concatenation: path.Join allocates three or four times for
// the "//" it makes and cleans, for each of the thousands of cgroups of a
// scan.
func joinClean(dir, rel string) string {
	if !path.IsAbs(dir) || path.Clean(dir) != dir || rel == "" || rel == "." || rel == ".." || path.Clean(rel) != rel ||
		strings.HasPrefix(rel, "../") {
		return path.Join(dir, rel)
	}
	switch {
	case rel == "/":
		return dir
	case dir == "/" && rel[0] == '/':
		return rel
	case dir == "/":
		return "/" + rel
	case rel[0] == '/':
		return dir + rel
	}
	return dir + "/" + rel
}

// assemble groups pod and container cgroups into pods.
func (s *Scanner) assemble(n *Node, r stats.Reader) {
	byUID := map[string]*Pod{}
	get := func(uid, qos string) *Pod {
		p := byUID[uid]
		if p == nil {
			p = &Pod{UID: uid, QoS: qos}
			byUID[uid] = p
		}
		if p.QoS == "" {
			p.QoS = qos
		}
		return p
	}
	var named []*Cgroup
	n.Root.Walk(func(c *Cgroup) {
		id := c.Identity
		if id.Nested {
			return
		}
		switch {
		case id.Kind == layout.Pod:
			p := get(id.PodUID, id.QoS)
			if p.Cgroup == nil {
				p.Cgroup = c
				p.QoS = id.QoS
			}
		case id.IsContainerLike() || (id.Kind == layout.Foreign && id.ContainerID != ""):
			uid := id.PodUID
			if uid != "" && id.Kind == layout.Misplaced {
				// Only its name ties it to the pod: confirmed below.
				named = append(named, c)
				return
			}
			if uid == "" {
				if mp, ok := s.Meta.ByContainer(id.ContainerID); ok && id.ContainerID != "" {
					uid = mp.UID
				} else if mp, ok := s.Meta.ByName(id.PodName); ok && id.PodName != "" {
					uid = mp.UID
				}
			}
			if uid == "" {
				n.Unattached = append(n.Unattached, c)
				return
			}
			p := get(uid, id.QoS)
			p.Containers = append(p.Containers, &Container{
				ID: id.ContainerID, Runtime: id.Runtime, Cgroup: c,
				Misplaced: id.Kind != layout.Container && id.Kind != layout.Sandbox || !inPod(c),
				Sandbox:   id.Kind == layout.Sandbox,
			})
		}
	})
	s.confirm(n, named, get, func(uid string) *Pod { return byUID[uid] })
	if s.ProcsWhereUsed {
		s.readUsedProcs(n, r, byUID)
	}
	for _, p := range byUID {
		markLeftovers(p, s.procsElsewhere)
		if mp, ok := s.Meta.Pod(p.UID); ok {
			p.Name, p.Namespace = mp.Name, mp.Namespace
			if p.QoS == "" {
				p.QoS = mp.QoS
			}
			for _, c := range p.Containers {
				c.Name = mp.ContainerName(c.ID)
				if c.Runtime == "" {
					c.Runtime = mp.ContainerRuntime(c.ID)
				}
				if isPause(c, mp) {
					c.Sandbox = true
				}
			}
		}
		n.Pods = append(n.Pods, p)
	}
	// A node has one CRI runtime: when the metadata names exactly one,
	// it is also the runtime of the containers it does not list (sandbox
	// containers, which a pod's status leaves out).
	if rt := s.nodeRuntime(); rt != "" {
		for _, p := range n.Pods {
			for _, c := range p.Containers {
				if c.Runtime == "" && c.Cgroup.Identity.Kind == layout.Container {
					c.Runtime = rt
				}
			}
		}
	}
	slices.SortFunc(n.Pods, func(a, b *Pod) int {
		if c := strings.Compare(qosRank(a.QoS), qosRank(b.QoS)); c != 0 {
			return c
		}
		if c := strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.UID, b.UID)
	})
}

// confirm attaches the cgroups that only their name ties to a pod (a
// "<slice>:<prefix>:<id>" directory, a pod-named cgroup away from the pod)
// as far as the metadata confirms them; see Container.Unconfirmed and
// Node.Foreign. A directory outside the kubelet's tree can be made by
// anyone with a delegated cgroup subtree; the metadata (the runtime's
// ListContainers, the API server's container statuses) cannot.
//
//   - The ID is one of the pod's containers: a misplaced container.
//   - The ID is the pod's sandbox (a CRI source names it): a misplaced
//     sandbox, counted in the pod's figures, in no container list.
//   - The metadata lists every container of the pod by ID and this is
//     none of them: foreign, attached to no pod. With the API server as
//     the source, which never names sandboxes, one such cgroup of a pod
//     whose sandbox is not inside the pod cgroup is taken as the misplaced
//     sandbox instead (as the kubelet's tree's unlisted container is), but
//     unconfirmed: it is never moved.
//   - The metadata cannot say (none given, the pod unknown to it, a
//     container without an ID yet): attached, unconfirmed, never moved.
func (s *Scanner) confirm(n *Node, named []*Cgroup, get func(uid, qos string) *Pod, pod func(uid string) *Pod) {
	type verdict struct {
		c     *Cgroup
		claim metadata.Claim
	}
	vs := make([]verdict, 0, len(named))
	candidates := map[string]int{} // unlisted IDs by pod, where the metadata names no sandbox
	for _, c := range named {
		id := c.Identity
		v := verdict{c, s.Meta.Check(id.PodUID, id.ContainerID)}
		if v.claim == metadata.ClaimNotListed {
			if mp, _ := s.Meta.Pod(id.PodUID); !mp.NamesSandboxes() && !hasPause(pod(id.PodUID), mp) {
				candidates[id.PodUID]++
			}
		}
		vs = append(vs, v)
	}
	for _, v := range vs {
		id := v.c.Identity
		ct := &Container{ID: id.ContainerID, Runtime: id.Runtime, Cgroup: v.c, Misplaced: true}
		switch v.claim {
		case metadata.ClaimContainer:
		case metadata.ClaimSandbox:
			ct.Sandbox = true
		case metadata.ClaimNotListed:
			if candidates[id.PodUID] != 1 {
				n.Foreign = append(n.Foreign, v.c)
				continue
			}
			ct.Sandbox = true
			ct.Unconfirmed = "the pod's metadata (the API server's) lists its containers but not its sandbox: this cgroup is taken as the sandbox by elimination"
		default:
			ct.Unconfirmed = s.unknownWhy(id.PodUID)
		}
		p := get(id.PodUID, id.QoS)
		p.Containers = append(p.Containers, ct)
	}
}

// unknownWhy says why the metadata could not confirm a cgroup of pod uid.
func (s *Scanner) unknownWhy(uid string) string {
	if s.Meta.Len() == 0 {
		return "no pod metadata to confirm that the pod has this container (give --pods or --metadata)"
	}
	if _, ok := s.Meta.Pod(uid); !ok {
		return "the pod metadata does not know pod " + uid
	}
	return "the pod metadata has a container of the pod without an ID yet"
}

// hasPause reports whether pod p (nil: none yet) has its sandbox in a
// cgroup inside the pod cgroup, by isPause's rule.
func hasPause(p *Pod, mp *metadata.Pod) bool {
	if p == nil || mp == nil {
		return false
	}
	for _, c := range p.Containers {
		if isPause(c, mp) {
			return true
		}
	}
	return false
}

// nodeRuntime is the one runtime the metadata's container IDs name, or ""
// when they name none or several.
func (s *Scanner) nodeRuntime() string {
	rt := ""
	for _, p := range s.Meta.Pods() {
		for _, c := range p.Containers {
			switch {
			case c.Runtime == "":
			case rt == "":
				rt = c.Runtime
			case rt != c.Runtime:
				return ""
			}
		}
	}
	return rt
}

// readUsedProcs reads, for a ProcsWhereUsed scan, the process lists
// whose counts are used (see Scanner.ProcsWhereUsed): in the subtrees of
// misplaced containers (markLeftovers, the audit's misplaced and escaped
// rules), of unattached and foreign cgroups, and, when the metadata
// knows some pods, of the pods it does not know (the audit's orphan
// rule). Each is read as the walk would have read it (pids.current
// first, which ProcsWhereUsed also leaves out where it spares no list),
// in walk order; a cgroup found gone has none.
func (s *Scanner) readUsedProcs(n *Node, r stats.Reader, pods map[string]*Pod) {
	used := map[*Cgroup]bool{}
	for _, c := range n.Unattached {
		used[c] = true
	}
	for _, c := range n.Foreign {
		used[c] = true
	}
	orphans := s.Meta.Len() > 0
	for _, p := range pods {
		if _, known := s.Meta.Pod(p.UID); orphans && !known && p.Cgroup != nil {
			used[p.Cgroup] = true
		}
		for _, c := range p.Containers {
			if c.Misplaced {
				used[c.Cgroup] = true
			}
		}
	}
	if len(used) == 0 {
		return
	}
	if s.Steady != nil {
		r.Counters = s.Steady.kept // v2's lists, as Steady.read reads them
	}
	var visit func(c *Cgroup, in bool)
	visit = func(c *Cgroup, in bool) {
		in = in || used[c]
		if in && c.Stats.Procs == nil && !c.Stats.Gone {
			// withThreads as the walk read it (an unlistable cgroup has
			// no children).
			withThreads := !s.Places.V2 && len(c.Children) > 0 && c.Parent != nil
			n.Errors = append(n.Errors, r.ReadProcs(c.Path, withThreads, &c.Stats)...)
		}
		for _, ch := range c.Children {
			visit(ch, in)
		}
	}
	visit(n.Root, false)
}

// markLeftovers turns a misplaced container cgroup that holds no process
// and no child cgroup into a leftover when the same container also has a
// cgroup inside the pod: the processes were moved home and only the
// runtime's directory remains. An empty misplaced cgroup with no placed
// twin stays misplaced (the container may simply be idle or stopped), and
// so does one that elsewhere (below) says still holds processes.
func markLeftovers(p *Pod, elsewhere func(*Cgroup) bool) {
	placed := map[string]bool{}
	for _, c := range p.Containers {
		if !c.Misplaced && c.ID != "" {
			placed[c.ID] = true
		}
	}
	for _, c := range p.Containers {
		procs := c.Cgroup.Stats.Procs
		if c.Misplaced && placed[c.ID] && procs != nil && *procs == 0 && len(c.Cgroup.Children) == 0 && !elsewhere(c.Cgroup) {
			c.Misplaced, c.Leftover = false, true
		}
	}
}

// procsElsewhere reports whether a v1 cgroup holds processes in a
// hierarchy other than the cpu one, whose cgroup.procs Stats.Procs
// counts: an adoption moves the processes hierarchy by hierarchy (cpu,
// then memory, then pids), so one cut off between two (the agent killed)
// leaves the runtime's cgroup empty in the cpu hierarchy and full in the
// others — not a leftover, but a move to finish. A list that cannot be
// read counts as busy (unknown is not empty); a hierarchy without the
// cgroup as empty. Always false on v2, where there is one list.
func (s *Scanner) procsElsewhere(c *Cgroup) bool {
	if s.Places.V2 {
		return false
	}
	for _, m := range []string{s.Places.CPUAcct, s.Places.Memory, s.Places.Pids} {
		if m == "" || m == s.Places.CPU {
			continue
		}
		b, err := s.FS.ReadFile(joinClean(m, path.Join(c.Path, "cgroup.procs")))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil || len(strings.TrimSpace(string(b))) > 0 {
			return true
		}
	}
	return false
}

// inPod reports whether a container-like cgroup has a pod cgroup above it.
func inPod(c *Cgroup) bool {
	for p := c.Parent; p != nil; p = p.Parent {
		if p.Identity.Kind == layout.Pod {
			return true
		}
	}
	return false
}

func qosRank(q string) string {
	switch q {
	case layout.Guaranteed:
		return "0"
	case layout.Burstable:
		return "1"
	case layout.BestEffort:
		return "2"
	}
	return "3"
}

// guarantee fills GuaranteedCores. The weights compared are the raw
// weight files of siblings. On v1, threads sitting directly in a non-leaf
// cgroup below the root compete with its child groups, each like a group
// of weight 1024 (a nice-0 thread). Threads in the root cgroup itself are
// not counted: they are kernel threads and early-boot services that are
// almost always asleep, and counting them as busy would bury every figure
// under a number that has nothing to do with contention. v2 allows
// processes only in leaves (and the root), so nothing is counted there.
// A cgroup whose weight is unknown is counted at the default weight; one
// that vanished during the scan is not counted.
func (s *Scanner) guarantee(n *Node) {
	zip(n.Root, fairnessTree(n, s.Places.V2, nil), groupKids, func(c *Cgroup, g *fairness.Group) { c.GuaranteedCores = g.Guaranteed })
}

func groupKids(g *fairness.Group) []*fairness.Group { return g.Children }

// fairnessTree builds the scheduler's view of the node (see guarantee)
// and fills its guarantees; override replaces the weights of the cgroups
// it names (by path).
func fairnessTree(n *Node, v2 bool, override map[string]uint64) *fairness.Group {
	def := float64(fairness.DefaultShares)
	if v2 {
		def = fairness.DefaultWeight
	}
	var build func(c *Cgroup) *fairness.Group
	build = func(c *Cgroup) *fairness.Group {
		g := &fairness.Group{Weight: def, ThreadWeight: fairness.ThreadWeightV1, Children: make([]*fairness.Group, len(c.Children))}
		if w, ok := override[c.Path]; ok {
			g.Weight = float64(w)
		} else if w := c.Stats.CPU.Weight; w != nil {
			g.Weight = float64(*w)
		} else if c.Stats.Gone {
			g.Weight = 0 // vanished while scanned: it competes for nothing
		}
		if !v2 && c.Parent != nil && len(c.Children) > 0 && c.Stats.Threads != nil {
			g.Threads = *c.Stats.Threads
		}
		for i, ch := range c.Children {
			g.Children[i] = build(ch)
		}
		return g
	}
	g := build(n.Root)
	fairness.Guarantee(g, float64(n.CPUs))
	return g
}

// GuaranteedWith is what the cgroups at paths would be guaranteed under
// full contention if the cgroups in weights had those weights (raw weight
// file values) — the node as a fix would leave it. The node is not
// changed.
func (n *Node) GuaranteedWith(weights map[string]uint64, paths ...string) map[string]float64 {
	out := make(map[string]float64, len(paths))
	zip(n.Root, fairnessTree(n, n.Version == mounts.V2, weights), groupKids, func(c *Cgroup, g *fairness.Group) {
		if slices.Contains(paths, c.Path) {
			out[c.Path] = g.Guaranteed
		}
	})
	return out
}

// Rate fills UsageCores in cur from the CPU usage difference since prev
// (matched by path). Cgroups absent from prev, or whose usage is unknown
// or went backwards (a cgroup removed and recreated), stay unknown.
func Rate(prev, cur *Node) {
	dt := cur.Time.Sub(prev.Time).Seconds()
	if dt <= 0 {
		return
	}
	before := make(map[string]uint64, prev.Cgroups)
	prev.Root.Walk(func(c *Cgroup) {
		if u := c.Stats.CPU.UsageNs; u != nil {
			before[c.Path] = *u
		}
	})
	cur.Root.Walk(func(c *Cgroup) {
		u := c.Stats.CPU.UsageNs
		if u == nil {
			return
		}
		if b, ok := before[c.Path]; ok && *u >= b {
			r := float64(*u-b) / 1e9 / dt
			c.UsageCores = &r
		}
	})
}

// isPause reports whether a container cgroup of a pod is the pod's
// sandbox (pause) container: the CRI names it as the pod's sandbox, or the
// pod's metadata knows the ID of every container it declares and this one
// is none of them. The kubelet lists only declared containers; the
// sandbox's usage counts in the pod's figures only.
func isPause(c *Container, mp *metadata.Pod) bool {
	if c.ID == "" || c.Misplaced || c.Sandbox || c.Cgroup.Identity.Kind != layout.Container {
		return false
	}
	if mp.SandboxID != "" {
		return c.ID == mp.SandboxID
	}
	if len(mp.Containers) == 0 {
		return false
	}
	for _, mc := range mp.Containers {
		if mc.ID == "" {
			return false // a container not started yet: cannot tell
		}
		if mc.ID == c.ID {
			return false
		}
	}
	return true
}
