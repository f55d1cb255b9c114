package layout

import (
	"cmp"
	"regexp"
	"strings"
)

// Kind is what a cgroup is.
type Kind string

const (
	// Host is a cgroup outside the kubelet's tree that names no pod.
	Host Kind = "host"
	// KubeRoot is the kubelet's root (kubepods, kubepods.slice, ...).
	KubeRoot Kind = "kubepods"
	// QoSTier is the burstable or besteffort tier.
	QoSTier Kind = "qos"
	// Pod is a pod cgroup where the kubelet put it.
	Pod Kind = "pod"
	// Container is a container cgroup inside its pod's cgroup.
	Container Kind = "container"
	// Sandbox is per-pod runtime overhead: Kata's sandbox cgroups, CRI-O's
	// conmon.
	Sandbox Kind = "sandbox"
	// Misplaced is a container cgroup that names a pod but sits outside
	// that pod's cgroup.
	Misplaced Kind = "misplaced"
	// Escaped is a cgroup that a VM runner created for a pod's processes
	// outside the kubelet's tree, named for the pod (not its UID).
	Escaped Kind = "escaped"
	// Foreign is a shape nobody knows inside the kubelet's tree, or a
	// container-shaped cgroup outside it that names no pod.
	Foreign Kind = "foreign"
)

// Driver is the kubelet's cgroup driver.
type Driver string

const (
	Cgroupfs Driver = "cgroupfs"
	Systemd  Driver = "systemd"
)

// QoS classes as the kubelet names its tiers.
const (
	Guaranteed = "guaranteed"
	Burstable  = "burstable"
	BestEffort = "besteffort"
)

// Identity is what a cgroup was found to be.
type Identity struct {
	Kind   Kind   `json:"kind"`
	Driver Driver `json:"driver,omitempty"`
	QoS    string `json:"qos,omitempty"`
	// PodUID is normalised to the API form (dashes); static pods' 32-hex
	// UIDs are kept as they are.
	PodUID string `json:"podUID,omitempty"`
	// PodName is set by shapes that carry the pod's name (VM runners).
	PodName     string `json:"podName,omitempty"`
	ContainerID string `json:"containerID,omitempty"`
	// Runtime is the runtime the name points at: containerd, crio,
	// docker, kata, conmon.
	Runtime string `json:"runtime,omitempty"`
	// Shape names the misplaced, escaped, sandbox or foreign form found.
	Shape string `json:"shape,omitempty"`
	// Nested is set for a cgroup below a container, sandbox, misplaced,
	// escaped or foreign cgroup; it carries its ancestor's identity.
	Nested bool `json:"nested,omitempty"`
}

// Root is the identity of a hierarchy's root cgroup.
func Root() Identity { return Identity{Kind: Host} }

// Shapes of cgroups outside their place.
const (
	ShapeLiteralPath = "literal-cgroups-path" // "<slice>:<prefix>:<id>" as a directory (seed 003)
	ShapePodOutside  = "pod-uid-outside-pod"  // a pod-named cgroup away from the pod's cgroup
	ShapeKata        = "kata-sandbox"         // kata_<sandbox id>
	ShapeKataOver    = "kata-overhead"        // kata_overhead/...
	ShapeConmon      = "crio-conmon"
	ShapeVMRunner    = "vm-runner" // NeonVM's /<pod>-vm-runner
	ShapeNeonQEMU    = "neonvm-qemu"
	ShapeUnknown     = "unknown"
	ShapeContainer   = "container-outside-kubepods"
)

const (
	uidDash  = `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`
	uidUnder = `[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}`
	uidHash  = `[0-9a-f]{32}` // static pods: a hash of the manifest
	hexID    = `[0-9a-f]{64}`
)

var (
	// kubepods (cgroupfs) or [<prefix>-]kubepods.slice (systemd).
	kubeRootRe = regexp.MustCompile(`^(?:kubepods|(?:[A-Za-z0-9_.]+-)?kubepods\.slice)$`)
	tierRe     = regexp.MustCompile(`^(?:(burstable|besteffort)|(?:[A-Za-z0-9_.]+-)?kubepods-(burstable|besteffort)\.slice)$`)
	// cgroupfs: pod<uid>; systemd: [<prefix>-]kubepods[-<qos>]-pod<uid_>.slice
	podCgroupfsRe = regexp.MustCompile(`^pod(` + uidDash + `|` + uidHash + `)$`)
	podSystemdRe  = regexp.MustCompile(`^(?:[A-Za-z0-9_.]+-)?kubepods(?:-(burstable|besteffort))?-pod(` + uidUnder + `|` + uidHash + `)\.slice$`)
	// Containers inside a pod cgroup, named by any prefix of the runtime
	// table.
	containerRe = regexp.MustCompile(`^(?:(` + prefixPattern(true) + `)-)?(` + hexID + `)(\.scope)?$`)
	kataRe      = regexp.MustCompile(`^kata_([0-9a-f]{64}|[A-Za-z0-9-]+)$`)
	// The literal systemd cgroupsPath a non-systemd runtime made a
	// directory of: <slice>:<prefix>:<id>.
	literalRe = regexp.MustCompile(`^([^:/]+\.slice):([^:/]+):(` + hexID + `)$`)
	// Any name that carries a pod UID.
	anyPodRe   = regexp.MustCompile(`pod(` + uidDash + `|` + uidUnder + `)`)
	vmRunnerRe = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)-vm-runner$`)
	neonQEMURe = regexp.MustCompile(`^neonvm-qemu-([a-z0-9]([-a-z0-9.]*[a-z0-9])?)$`)
	// A container runtime's own scope, outside the kubelet's tree.
	containerOnly = regexp.MustCompile(`^(?:(` + prefixPattern(false) + `)-)(` + hexID + `)\.scope$`)
)

// NormalizeUID turns a cgroup-name UID (underscores) into the API form.
func NormalizeUID(s string) string { return strings.ReplaceAll(s, "_", "-") }

// ShortID is the first 12 characters of a container (or pod) ID, as
// crictl and docker show it; a shorter ID whole.
func ShortID(id string) string { return id[:min(len(id), 12)] }

// Child classifies the cgroup called name whose parent has identity parent.
func Child(parent Identity, name string) Identity {
	switch parent.Kind {
	case Host:
		return outside(name)
	case KubeRoot, QoSTier:
		if m := tierRe.FindStringSubmatch(name); m != nil && parent.Kind == KubeRoot {
			return Identity{Kind: QoSTier, Driver: parent.Driver, QoS: m[1] + m[2]}
		}
		if id, ok := pod(name, parent.Driver); ok {
			id.QoS = cmp.Or(parent.QoS, Guaranteed) // the kubelet root holds the Guaranteed pods
			return id
		}
		if id, ok := besidePod(name); ok {
			return id
		}
		return foreignIn(parent)
	case Pod:
		id := Identity{Driver: parent.Driver, QoS: parent.QoS, PodUID: parent.PodUID}
		if m := containerRe.FindStringSubmatch(name); m != nil {
			id.Kind, id.ContainerID, id.Runtime = Container, m[2], runtimeOf(m[1])
			if id.Runtime == RuntimeConmon {
				id.Kind, id.Shape = Sandbox, ShapeConmon
			}
			return id
		}
		if m := kataRe.FindStringSubmatch(name); m != nil {
			id.Kind, id.Runtime, id.Shape, id.ContainerID = Sandbox, RuntimeKata, ShapeKata, m[1]
			return id
		}
		id.Kind, id.Shape = Foreign, ShapeUnknown
		return id
	}
	// Below a container or any cgroup that is not the kubelet's: the same
	// thing, one level down.
	nested := parent
	nested.Nested = true
	return nested
}

// foreignIn is an unknown shape inside the kubelet's tree.
func foreignIn(parent Identity) Identity {
	return Identity{Kind: Foreign, Driver: parent.Driver, QoS: parent.QoS, Shape: ShapeUnknown}
}

func pod(name string, d Driver) (Identity, bool) {
	if m := podCgroupfsRe.FindStringSubmatch(name); m != nil {
		return Identity{Kind: Pod, Driver: d, PodUID: m[1]}, true
	}
	if m := podSystemdRe.FindStringSubmatch(name); m != nil {
		return Identity{Kind: Pod, Driver: d, PodUID: NormalizeUID(m[2])}, true
	}
	return Identity{}, false
}

// besidePod classifies the runtime cgroups that sit in the kubelet's tree
// next to pod cgroups rather than inside one: Kata's kata_<sandbox id>
// (sandbox_cgroup_only=false) and the literal "<slice>:<prefix>:<id>"
// directory made relative to a tier. Neither is a pod; both are attached
// to their pod by the inventory (the literal one by the UID it names, the
// Kata one by its sandbox ID through metadata) and shown as misplaced.
func besidePod(name string) (Identity, bool) {
	if id, ok := literal(name); ok {
		return id, true
	}
	if m := kataRe.FindStringSubmatch(name); m != nil {
		return Identity{Kind: Sandbox, Runtime: RuntimeKata, Shape: ShapeKata, ContainerID: m[1]}, true
	}
	return Identity{}, false
}

// outside classifies a child of a cgroup that is not the kubelet's.
func outside(name string) Identity {
	if kubeRootRe.MatchString(name) {
		d := Cgroupfs
		if strings.HasSuffix(name, ".slice") {
			d = Systemd
		}
		return Identity{Kind: KubeRoot, Driver: d}
	}
	if id, ok := literal(name); ok {
		return id
	}
	if name == "kata_overhead" {
		return Identity{Kind: Sandbox, Runtime: RuntimeKata, Shape: ShapeKataOver}
	}
	if id, ok := besidePod(name); ok {
		return id
	}
	if m := anyPodRe.FindStringSubmatch(name); m != nil {
		id := Identity{Kind: Misplaced, Shape: ShapePodOutside, PodUID: NormalizeUID(m[1])}
		if c := containerRe.FindStringSubmatch(name); c != nil {
			id.ContainerID, id.Runtime = c[2], runtimeOf(c[1])
		}
		return id
	}
	if m := vmRunnerRe.FindStringSubmatch(name); m != nil {
		return Identity{Kind: Escaped, Shape: ShapeVMRunner, PodName: m[1]}
	}
	if m := neonQEMURe.FindStringSubmatch(name); m != nil {
		return Identity{Kind: Escaped, Shape: ShapeNeonQEMU, PodName: m[1]}
	}
	if m := containerOnly.FindStringSubmatch(name); m != nil {
		return Identity{Kind: Foreign, Shape: ShapeContainer, ContainerID: m[2], Runtime: runtimeOf(m[1])}
	}
	return Identity{Kind: Host}
}

// literal recognises the systemd cgroupsPath "<slice>:<prefix>:<id>" that
// a runtime without systemd support made a directory of (seed 003).
func literal(name string) (Identity, bool) {
	m := literalRe.FindStringSubmatch(name)
	if m == nil {
		return Identity{}, false
	}
	id := Identity{Kind: Misplaced, Shape: ShapeLiteralPath, ContainerID: m[3], Runtime: runtimeOf(m[2])}
	if p, ok := pod(m[1], Systemd); ok {
		id.PodUID, id.Driver = p.PodUID, Systemd
		if q := podSystemdRe.FindStringSubmatch(m[1]); q != nil && q[1] != "" {
			id.QoS = q[1]
		} else {
			id.QoS = Guaranteed
		}
	} else if u := anyPodRe.FindStringSubmatch(m[1]); u != nil {
		id.PodUID = NormalizeUID(u[1])
	}
	return id, true
}

// IsContainerLike reports whether a cgroup holds a container's (or a
// pod's escaped) processes: the unit that the inventory attaches to a pod.
func (id Identity) IsContainerLike() bool {
	switch id.Kind {
	case Container, Misplaced, Escaped, Sandbox:
		return true
	}
	return false
}
