package inventory

import (
	"strings"
	"time"

	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/mounts"
	"github.com/cgwarden/cgwarden/internal/stats"
)

// Cgroup is one cgroup of the walked hierarchy.
type Cgroup struct {
	// Path is the cgroup's path inside the hierarchy ("/" for the root).
	Path     string
	Identity layout.Identity
	Stats    stats.Stats
	Parent   *Cgroup
	Children []*Cgroup

	// GuaranteedCores is the CPU the cgroup gets when everything is busy.
	GuaranteedCores float64
	// UsageCores is the CPU rate between two scans; nil after one scan
	// or when the usage is unknown.
	UsageCores *float64
	// FairCores is the demand-aware fair share, when computed.
	FairCores *float64
	// DemandCores is the CPU the cgroup wanted over the interval (see
	// FairShare), when computed.
	DemandCores *float64
}

// Name is the last element of the path.
func (c *Cgroup) Name() string {
	if c.Path == "/" {
		return "/"
	}
	return c.Path[strings.LastIndexByte(c.Path, '/')+1:]
}

// Within reports whether c is anc or lies below it.
func (c *Cgroup) Within(anc *Cgroup) bool {
	for ; c != nil; c = c.Parent {
		if c == anc {
			return true
		}
	}
	return false
}

// Walk calls fn for c and every cgroup below it, parents first.
func (c *Cgroup) Walk(fn func(*Cgroup)) {
	fn(c)
	for _, ch := range c.Children {
		ch.Walk(fn)
	}
}

// zip calls fn for c and every cgroup below it, parents first, each with
// its group in g, a tree built from c's (children, which kids gives, in
// the same order).
func zip[G any](c *Cgroup, g G, kids func(G) []G, fn func(*Cgroup, G)) {
	fn(c, g)
	for i, ch := range c.Children {
		zip(ch, kids(g)[i], kids, fn)
	}
}

// Pod is a pod found on the node.
type Pod struct {
	UID       string
	QoS       string
	Name      string
	Namespace string
	// Cgroup is the pod's cgroup in the kubelet's tree; nil when only
	// misplaced containers name the pod.
	Cgroup     *Cgroup
	Containers []*Container
}

// Label names the pod for a message: namespace/name, or its UID when its
// name is unknown.
func (p *Pod) Label() string {
	if p.Name != "" {
		return p.Namespace + "/" + p.Name
	}
	return p.UID
}

// Container is a container (or sandbox) cgroup attached to a pod.
type Container struct {
	ID      string
	Runtime string
	Name    string
	Cgroup  *Cgroup
	// Misplaced is set when the cgroup sits outside the pod's cgroup.
	Misplaced bool
	// Sandbox is set for runtime overhead (Kata sandbox, conmon) and the
	// pod's sandbox (pause) container: none is a container of the pod's.
	Sandbox bool
	// Unconfirmed says why the metadata did not confirm a cgroup that
	// only its name attaches to the pod (see Scanner.confirm); "" when it
	// did, or when the cgroup's place or the metadata attached it. An
	// unconfirmed cgroup is shown and counted with its pod but never
	// moved into it.
	Unconfirmed string
	// Leftover is set for an empty cgroup outside the pod that names a
	// container which also has a cgroup inside the pod: what is left of a
	// misplaced container after `cgwarden fix` moved its processes (the
	// runtime owns the directory, so it stays). It is not misplaced any
	// more; its frozen counters (and, on v2, the memory charged before the
	// move) still belong to the pod.
	Leftover bool
}

// Node is one scan of a node.
type Node struct {
	Time    time.Time
	Version mounts.Version
	Driver  layout.Driver
	CPUs    int
	// Tree is the mount point of the walked hierarchy.
	Tree string
	Root *Cgroup
	// KubeRoot is the kubelet's root cgroup, nil when none was found.
	KubeRoot *Cgroup
	Pods     []*Pod
	// Unattached are container-shaped or escaped cgroups whose pod could
	// not be told (a VM runner's cgroup names a pod that is not known).
	Unattached []*Cgroup
	// Foreign are cgroups named like a misplaced container of a pod
	// ("<slice>:<prefix>:<id>" and the like) whose ID the pod's metadata
	// says is none of its containers: anyone with a delegated cgroup
	// subtree can make such a name. They are attached to no pod, counted
	// in no pod's figures and never moved.
	Foreign []*Cgroup
	// Errors are files that could not be read or parsed; the figures
	// they feed are unknown.
	Errors []error
	// Cgroups is the number of cgroups walked.
	Cgroups int
	// Meminfo is the node's /proc/meminfo; nil when it could not be read
	// (the node's memory figures then stay unknown on cgroup v2, whose
	// root cgroup has no memory.current).
	Meminfo *stats.Meminfo
}

// Pod returns the pod with uid.
func (n *Node) Pod(uid string) *Pod {
	for _, p := range n.Pods {
		if p.UID == uid {
			return p
		}
	}
	return nil
}

// Find returns the cgroup at path, or nil.
func (n *Node) Find(path string) *Cgroup {
	var found *Cgroup
	n.Root.Walk(func(c *Cgroup) {
		if found == nil && c.Path == path {
			found = c
		}
	})
	return found
}
