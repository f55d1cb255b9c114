package metadata

import (
	"context"
	"slices"
	"time"
)

// Lister lists the node's pods. Every pod source is one
// (internal/podsource: a pods file, the CRI, the API server's informer),
// and the agent's sizes read the pods through one (hold.MetaSource).
type Lister interface {
	Pods(ctx context.Context) ([]Pod, error)
}

// Pod is what is known of one pod besides its cgroups.
type Pod struct {
	UID       string
	Name      string
	Namespace string
	// QoS is the kubelet's class in tier naming: guaranteed, burstable,
	// besteffort ("" when unknown).
	QoS       string
	StartTime time.Time
	Labels    map[string]string
	// Annotation holds the pod's cgwarden.io/ annotations (from the API
	// server: OwnAnnotations), or all its sandbox's (from the CRI).
	Annotation map[string]string
	// RequestMilliCPU and LimitMilliCPU sum the containers' CPU requests
	// and limits (plus pod overhead); nil when unknown, 0 when none.
	RequestMilliCPU *int64
	LimitMilliCPU   *int64
	// VMSize is the size of the VM the pod runs, when the pod itself says
	// (a NeonVM runner's -vmspec argument); nil otherwise.
	VMSize *Size
	// Owners are the pod's ownerReferences (from the API server; a CRI
	// sandbox has none).
	Owners []Owner
	// SandboxID is the CRI pod sandbox ID when known (the newest, when
	// the runtime keeps several).
	SandboxID string
	// PastSandboxIDs are the pod's older sandboxes the CRI still lists
	// (their cgroups may still be there).
	PastSandboxIDs []string
	// RuntimeHandler is the CRI runtime handler the pod's sandbox runs
	// under (its RuntimeClass's handler; "" for the runtime's default or
	// when unknown).
	RuntimeHandler string
	Containers     []Container
	// MirrorOf is, for the API server's mirror of a static pod, the UID
	// the kubelet gave the static pod (its config hash, the
	// AnnotationMirror annotation): the name of the pod's cgroup, which
	// the mirror's own UID is not. Lookups by UID find the mirror by it.
	MirrorOf string
}

// AnnotationMirror marks the API server's mirror of a static pod; its
// value is the static pod's UID as the kubelet knows it.
const AnnotationMirror = "kubernetes.io/config.mirror"

// Owner is one of a pod's ownerReferences.
type Owner struct {
	APIVersion, Kind, Name, UID string
}

// Container is what is known of one container.
type Container struct {
	Name string
	ID   string // 64-hex, without the "containerd://" scheme
	// Runtime is what the containerID's scheme names (containerd, crio,
	// docker); "" when it had none.
	Runtime   string
	StartTime time.Time
	// RequestMilliCPU is the container's CPU request from the pod spec;
	// nil when unknown (a status without a matching spec entry).
	RequestMilliCPU *int64
}

// Lookup finds pods by UID, container ID or name. A nil *Set answers
// nothing, so callers need no nil checks.
type Set struct {
	byUID       map[string]*Pod
	byContainer map[string]*Pod
	byName      map[string]*Pod   // "namespace/name" and bare name when unique
	sizes       map[string]Size   // by pod UID
	via         map[string]string // the VM object of each size, by pod UID
	claims      map[string]claim  // VMs pods claim without the VM's status naming them, by pod UID
	trust       Trust
	node        NodeInfo
}

// NewSet indexes pods. Its Trust is OperatorTrust: pods handed in by
// whoever runs the command. A live source (the agent, a command reading
// the node's runtime or API server) sets its own with SetTrust.
func NewSet(pods []Pod) *Set {
	s := &Set{byUID: map[string]*Pod{}, byContainer: map[string]*Pod{}, byName: map[string]*Pod{}, sizes: map[string]Size{},
		via: map[string]string{}, claims: map[string]claim{}, trust: OperatorTrust("the pod metadata given")}
	seen := map[string]int{}
	for i := range pods {
		p := &pods[i]
		s.byUID[p.UID] = p
		if p.SandboxID != "" {
			s.byContainer[p.SandboxID] = p
		}
		for _, id := range p.PastSandboxIDs {
			s.byContainer[id] = p
		}
		for _, c := range p.Containers {
			if c.ID != "" {
				s.byContainer[c.ID] = p
			}
		}
		s.byName[p.Namespace+"/"+p.Name] = p
		seen[p.Name]++
	}
	for i := range pods {
		if seen[pods[i].Name] == 1 {
			s.byName[pods[i].Name] = &pods[i]
		}
	}
	s.indexMirrors(pods)
	return s
}

// indexMirrors lets a static pod's UID find its mirror. Anyone who may
// create pods may write the mirror annotation, so an alias is taken only
// when exactly one pod claims it and no pod has it as its own UID: a
// second claimant leaves the static pod's cgroup unnamed, as it was
// before, rather than named by whoever came first.
func (s *Set) indexMirrors(pods []Pod) {
	claims := map[string][]*Pod{}
	for i := range pods {
		if m := pods[i].MirrorOf; m != "" && m != pods[i].UID {
			claims[m] = append(claims[m], &pods[i])
		}
	}
	for uid, ps := range claims {
		if _, own := s.byUID[uid]; !own && len(ps) == 1 {
			s.byUID[uid] = ps[0]
		}
	}
}

// Pod returns the pod with uid.
func (s *Set) Pod(uid string) (*Pod, bool) {
	if s == nil {
		return nil, false
	}
	p, ok := s.byUID[uid]
	return p, ok
}

// ByContainer returns the pod that owns a container or sandbox ID.
func (s *Set) ByContainer(id string) (*Pod, bool) {
	if s == nil {
		return nil, false
	}
	p, ok := s.byContainer[id]
	return p, ok
}

// ByName returns the pod called "namespace/name", or "name" when that is
// unique on the node.
func (s *Set) ByName(name string) (*Pod, bool) {
	if s == nil {
		return nil, false
	}
	p, ok := s.byName[name]
	return p, ok
}

// Pods lists every pod, in no particular order.
func (s *Set) Pods() []*Pod {
	if s == nil {
		return nil
	}
	out := make([]*Pod, 0, len(s.byUID))
	for _, p := range s.byUID {
		out = append(out, p)
	}
	return out
}

// Len is the number of pods.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.byUID)
}

// container is the container id of pod p; the zero Container when it has
// none.
func (p *Pod) container(id string) Container {
	if i := slices.IndexFunc(p.Containers, func(c Container) bool { return c.ID == id }); i >= 0 {
		return p.Containers[i]
	}
	return Container{}
}

// ContainerRuntime returns the runtime of container id in pod p, "" when
// unknown.
func (p *Pod) ContainerRuntime(id string) string { return p.container(id).Runtime }

// ContainerName returns the name of container id in pod p.
func (p *Pod) ContainerName(id string) string { return p.container(id).Name }

// Claim is what the metadata says of a pod UID and container ID that a
// cgroup's name puts together.
type Claim string

const (
	// ClaimContainer: the ID is one of the pod's containers.
	ClaimContainer Claim = "container"
	// ClaimSandbox: the ID is the pod's sandbox (now or earlier).
	ClaimSandbox Claim = "sandbox"
	// ClaimNotListed: the metadata lists every container of the pod by ID
	// and this ID is none of them, nor a sandbox it names.
	ClaimNotListed Claim = "not-listed"
	// ClaimUnknown: the metadata cannot say: there is none, it does not
	// know the pod, or a container of the pod has no ID yet (not
	// started, or a status not yet written).
	ClaimUnknown Claim = "unknown"
)

// Check says whether the pod with uid has a container or sandbox id. It is
// how a cgroup that only its name attaches to a pod is confirmed: a
// directory outside the kubelet's tree can be made by anyone with a
// delegated cgroup subtree, the metadata only by the runtime and the
// kubelet.
func (s *Set) Check(uid, id string) Claim {
	p, ok := s.Pod(uid)
	if !ok || id == "" {
		return ClaimUnknown
	}
	if id == p.SandboxID || slices.Contains(p.PastSandboxIDs, id) {
		return ClaimSandbox
	}
	if len(p.Containers) == 0 {
		return ClaimUnknown
	}
	complete := true
	for _, c := range p.Containers {
		if c.ID == id {
			return ClaimContainer
		}
		complete = complete && c.ID != ""
	}
	if !complete {
		return ClaimUnknown
	}
	return ClaimNotListed
}

// NamesSandboxes reports whether the metadata knows the pod's sandbox ID
// (a CRI source does; the API server's pod status does not).
func (p *Pod) NamesSandboxes() bool { return p.SandboxID != "" }
