package layout

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Runtime naming in one place: the kubelet's layout names a container's
// cgroup after the runtime that made it, reading a name tells the runtime
// back, the kubelet's status names it in a containerID's scheme, and the
// runtime names itself to an NRI plugin. Every reader of those names asks
// this table (the classifier's patterns are built from it).

// Names layout gives runtimes (Identity.Runtime, metadata.Container.Runtime).
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "crio"
	RuntimeDocker     = "docker"
	// RuntimeConmon is CRI-O's container monitor, a per-container sandbox
	// cgroup beside the container's (crio-conmon-<id>).
	RuntimeConmon = "conmon"
	// RuntimeKata is Kata Containers' sandbox and overhead cgroups
	// (kata_<sandbox id>, kata_overhead).
	RuntimeKata = "kata"
)

// Runtime is one runtime in each of the forms its name takes.
type Runtime struct {
	// Name is layout's name for it.
	Name string
	// Prefixes start its container cgroups' names (<prefix>-<id>[.scope]);
	// the first is the one it writes, the others are only read.
	Prefixes []string
	// Schemes are the containerID schemes of a pod's status
	// ("containerd://<id>").
	Schemes []string
	// NRI are the names it gives itself when an NRI plugin registers.
	NRI []string
	// Sandbox is set for a runtime's overhead cgroup rather than a
	// container's.
	Sandbox bool
}

// runtimes is the table. The runwasi shims (containerd-shim-spin-v2,
// -wasmtime, -slight) are containerd runtime handlers, not runtimes: their
// cgroups carry containerd's prefix, also in the literal
// "<slice>:cri-containerd:<id>" directory their pre-2025 versions made
// (seed 003). cri-dockerd names containers docker-<id>.scope under systemd.
var runtimes = []Runtime{
	{Name: RuntimeContainerd, Prefixes: []string{"cri-containerd"}, Schemes: []string{"containerd"}, NRI: []string{"containerd"}},
	{Name: RuntimeCRIO, Prefixes: []string{"crio", "cri-o"}, Schemes: []string{"cri-o"}, NRI: []string{"cri-o", "crio"}},
	{Name: RuntimeDocker, Prefixes: []string{"docker"}, Schemes: []string{"docker"}},
	{Name: RuntimeConmon, Prefixes: []string{"crio-conmon"}, Sandbox: true},
	// Kata's cgroups are kata_<id>, not <prefix>-<id>: kataRe.
	{Name: RuntimeKata, Sandbox: true},
}

// lookup finds the runtime one of whose names, as field picks them, is
// name.
func lookup(name string, field func(Runtime) []string) (Runtime, bool) {
	for _, r := range runtimes {
		if slices.Contains(field(r), name) {
			return r, true
		}
	}
	return Runtime{}, false
}

// prefixPattern is a regexp alternation of container cgroup name
// prefixes: every prefix read (all), or only the one each container
// runtime writes (written: what a scope outside the kubelet's tree
// carries).
func prefixPattern(all bool) string {
	var alts []string
	for _, r := range runtimes {
		if all {
			alts = append(alts, r.Prefixes...)
		} else if !r.Sandbox && len(r.Prefixes) > 0 {
			alts = append(alts, r.Prefixes[0])
		}
	}
	for i, a := range alts {
		alts[i] = regexp.QuoteMeta(a)
	}
	return strings.Join(alts, "|")
}

// runtimeOf maps a cgroup name prefix to the runtime that makes it; a
// prefix the table does not know is returned as it is (the literal
// "<slice>:<prefix>:<id>" directory carries any prefix a runtime was
// given).
func runtimeOf(prefix string) string {
	if prefix == "" {
		// A bare 64-hex ID: containerd and cri-dockerd name container
		// cgroups alike under the cgroupfs driver, so the name does not
		// tell. Unknown, not guessed; metadata (the containerID scheme of
		// a pods file, or the CRI) can say.
		return ""
	}
	if r, ok := lookup(prefix, func(r Runtime) []string { return r.Prefixes }); ok {
		return r.Name
	}
	return prefix
}

// RuntimeOfContainerID names the runtime of a pod status's containerID by
// its scheme ("containerd://…" → containerd, "cri-o://…" → crio); a scheme
// the table does not know is returned as it is, and "" without a scheme.
func RuntimeOfContainerID(id string) string {
	scheme, _, ok := strings.Cut(id, "://")
	if !ok {
		return ""
	}
	if r, ok := lookup(scheme, func(r Runtime) []string { return r.Schemes }); ok {
		return r.Name
	}
	return scheme
}

// RuntimeOfNRI maps the name a runtime gives an NRI plugin at Configure
// to layout's, "" when the table does not know it (ContainerName then
// names containers as containerd does under cgroupfs, and refuses the
// systemd form).
func RuntimeOfNRI(name string) string {
	if r, ok := lookup(name, func(r Runtime) []string { return r.NRI }); ok {
		return r.Name
	}
	return ""
}

// ContainerName is the name the kubelet's layout gives a container's
// cgroup for a driver and runtime: with systemd a scope named for the
// runtime, with cgroupfs the bare ID (CRI-O: crio-<id>).
func ContainerName(d Driver, runtime, id string) (string, error) {
	if len(id) != 64 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", fmt.Errorf("container ID %q is not 64 hex digits", id)
	}
	if d == Cgroupfs && runtime == "" {
		// containerd and cri-dockerd both name it by the bare ID, so an
		// unknown runtime still names it (CRI-O's crio-<id> says so).
		return id, nil
	}
	r, ok := lookup(runtime, func(r Runtime) []string { return []string{r.Name} })
	if !ok || r.Sandbox || len(r.Prefixes) == 0 {
		return "", fmt.Errorf("runtime %q has no known container cgroup name", runtime)
	}
	prefix := r.Prefixes[0]
	switch d {
	case Systemd:
		return prefix + "-" + id + ".scope", nil
	case Cgroupfs:
		if runtime == RuntimeCRIO {
			return prefix + "-" + id, nil
		}
		return id, nil
	}
	return "", fmt.Errorf("unknown cgroup driver %q", d)
}
