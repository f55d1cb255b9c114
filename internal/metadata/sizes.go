package metadata

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Size is a pod's real CPU size and where it came from.
type Size struct {
	MilliCPU int64
	// Source: "neonvm", "kubevirt", "annotation", "requests", "limits".
	Source string
}

// AnnotationCPU is cgwarden's own annotation for a pod's real size.
const AnnotationCPU = "cgwarden.io/cpu"

// SetSize records a declared size for a pod (from a VM object).
func (s *Set) SetSize(uid string, sz Size) {
	if s != nil {
		s.sizes[uid] = sz
	}
}

// Origin is where a pod's declared size came from and how it was taken,
// or why it was not: what `audit` shows beside each sized pod.
type Origin struct {
	// Source is the size's kind: "neonvm", "kubevirt", "annotation".
	Source string
	// Via says what stated it: "VM object NeonVM VirtualMachine ns/vm",
	// "the runner's -vmspec (...)", "annotation cgwarden.io/cpu=\"2\"".
	Via string
	// Trusted says why it is believed ("" for a VM object, which a cluster
	// administrator controls).
	Trusted string
	// DeclaredMilliCPU is the size as stated (0 when it is not a
	// quantity); MilliCPU the size taken, after the cap (0 when ignored).
	DeclaredMilliCPU, MilliCPU int64
	// Capped says why MilliCPU is below DeclaredMilliCPU.
	Capped string
	// Ignored says why the stated size was not taken; "" when it was.
	Ignored string
}

// Origin says where the declared size of pod uid comes from (see Trust
// for what is believed): a VM object matched to the pod, else a NeonVM
// runner's -vmspec, else the cgwarden.io/cpu annotation. ok is false when
// nothing declares a size.
func (s *Set) Origin(uid string) (o Origin, ok bool) {
	if s == nil {
		return Origin{}, false
	}
	if sz, found := s.sizes[uid]; found {
		o = Origin{Source: sz.Source, Via: "VM object", DeclaredMilliCPU: sz.MilliCPU}
		if v := s.via[uid]; v != "" {
			o.Via = "VM object " + v
		}
		if label := s.byLabel[uid]; label != "" {
			o.Via += fmt.Sprintf(" (by the pod's label %s only)", label)
			if !s.trust.PodClaims {
				o.Ignored = "not believed: the pod is neither owned (ownerReferences) by that VM nor named by its status; any pod can carry the label"
				return o, true
			}
			o.Trusted = s.trust.TrustedBy
		}
		return s.trust.take(o), true
	}
	p, found := s.byUID[uid]
	if !found {
		return Origin{}, false
	}
	var runner Origin
	if p.VMSize != nil {
		runner = Origin{Source: p.VMSize.Source, Via: "the runner's -vmspec", DeclaredMilliCPU: p.VMSize.MilliCPU}
		why := s.runnerDistrust(p)
		switch {
		case why == "":
			runner.Via += fmt.Sprintf(" (owned by NeonVM VirtualMachine %s/%s, which exists)", p.Namespace, p.neonVMOwner().Name)
			return s.trust.take(runner), true
		case s.trust.PodClaims:
			runner.Trusted = s.trust.TrustedBy
			return s.trust.take(runner), true
		}
		runner.Ignored = "not believed: " + why
	}
	a, found := p.Annotation[AnnotationCPU]
	if !found {
		// A runner's -vmspec not believed, or nothing at all.
		return runner, p.VMSize != nil
	}
	o = Origin{Source: "annotation", Via: fmt.Sprintf("annotation %s=%q", AnnotationCPU, a)}
	m, err := Quantity(a)
	if err == nil {
		o.DeclaredMilliCPU = m
	}
	if !s.trust.annotationTrusted(p.Namespace) {
		why := s.trust.Untrusted
		if why == "" {
			why = "no size policy is installed and --trust-size-annotations does not name the namespace"
		}
		o.Ignored = fmt.Sprintf("not trusted in namespace %s: %s", p.Namespace, why)
		return o, true
	}
	o.Trusted = s.trust.TrustedBy
	if err != nil {
		o.Ignored = err.Error()
		return o, true
	}
	return s.trust.take(o), true
}

// take checks a stated size and caps it at the node's allocatable CPU.
func (t Trust) take(o Origin) Origin {
	m := o.DeclaredMilliCPU
	switch {
	case m <= 0:
		o.Ignored = fmt.Sprintf("%dm: a size must be above 0", m)
		return o
	case m > MaxSizeMilliCPU:
		o.Ignored = fmt.Sprintf("%dm: above %d CPUs, which no node has", m, MaxSizeMilliCPU/1000)
		return o
	}
	o.MilliCPU = m
	if t.AllocatableMilliCPU > 0 && m > t.AllocatableMilliCPU {
		o.MilliCPU = t.AllocatableMilliCPU
		o.Capped = fmt.Sprintf("capped at the node's allocatable CPU (%sm, declared %sm)",
			strconv.FormatInt(t.AllocatableMilliCPU, 10), strconv.FormatInt(m, 10))
	}
	return o
}

// runnerDistrust says why a NeonVM runner's own -vmspec is not believed
// ("" when it is): the pod must be owned by a NeonVM VirtualMachine, and
// that VirtualMachine must be one the Set knows (ApplyVMs), with the UID
// the owner reference names. Anyone who can create a pod can write a
// -vmspec argument; only the NeonVM controller creates pods its
// VirtualMachines own.
func (s *Set) runnerDistrust(p *Pod) string {
	o := p.neonVMOwner()
	if o == nil {
		return "the pod is not owned (ownerReferences) by a NeonVM VirtualMachine"
	}
	id := fmt.Sprintf("NeonVM VirtualMachine %s/%s", p.Namespace, o.Name)
	uid, known := s.vms[vmKey("neonvm", p.Namespace, o.Name)]
	switch {
	case !known:
		return "its owner " + id + " is not known to exist (the agent reads VirtualMachines from the API server; offline, give them with --vms)"
	case uid != "" && o.UID != "" && uid != o.UID:
		return fmt.Sprintf("its owner reference names %s with UID %s, but that VirtualMachine's UID is %s", id, o.UID, uid)
	}
	return ""
}

// neonVMOwner is the pod's NeonVM VirtualMachine owner reference, if any.
func (p *Pod) neonVMOwner() *Owner {
	for i, o := range p.Owners {
		group, _, _ := strings.Cut(o.APIVersion, "/")
		if group == "vm.neon.tech" && o.Kind == "VirtualMachine" && o.Name != "" {
			return &p.Owners[i]
		}
	}
	return nil
}

// Origins lists the declared sizes of every pod that states one, taken
// or not, by namespace and name.
func (s *Set) Origins() []PodOrigin {
	if s == nil {
		return nil
	}
	var out []PodOrigin
	for _, p := range s.byUID {
		if o, ok := s.Origin(p.UID); ok {
			out = append(out, PodOrigin{Pod: p, Origin: o})
		}
	}
	slices.SortFunc(out, func(a, b PodOrigin) int {
		return strings.Compare(a.Pod.Namespace+"/"+a.Pod.Name+"/"+a.Pod.UID, b.Pod.Namespace+"/"+b.Pod.Name+"/"+b.Pod.UID)
	})
	return out
}

// PodOrigin is a pod and the origin of its declared size.
type PodOrigin struct {
	Pod *Pod
	Origin
}

// Size is a pod's size for the audit: its declared size (Origin) when
// one is taken, else its CPU limits, else its CPU requests. ok is false
// when nothing gives one.
func (s *Set) Size(uid string) (Size, bool) {
	if s == nil {
		return Size{}, false
	}
	if o, ok := s.Origin(uid); ok && o.Ignored == "" {
		return Size{o.MilliCPU, o.Source}, true
	}
	p, ok := s.byUID[uid]
	if !ok {
		return Size{}, false
	}
	if p.LimitMilliCPU != nil && *p.LimitMilliCPU > 0 {
		return Size{*p.LimitMilliCPU, "limits"}, true
	}
	if p.RequestMilliCPU != nil && *p.RequestMilliCPU > 0 {
		return Size{*p.RequestMilliCPU, "requests"}, true
	}
	return Size{}, false
}

// MaxSizeMilliCPU is the largest declared size cgwarden believes: 8192
// CPUs, the NR_CPUS Debian's amd64 kernels are built with. A larger
// annotation or VM size is a typo or hostile input, not a machine.
const MaxSizeMilliCPU = 8192 * 1000

// DeclaredSize is the size the VM weights fix sizes a BestEffort pod by:
// its Origin, when taken. Unlike Size it never falls back to limits or
// requests: a pod that has them is not BestEffort, and the kubelet already
// weighs it from its requests. ok is false when nothing declares a size;
// err says why a declared size is refused (not trusted, not a quantity,
// zero, negative, or above MaxSizeMilliCPU), and then ok is false too.
func (s *Set) DeclaredSize(uid string) (sz Size, ok bool, err error) {
	o, found := s.Origin(uid)
	switch {
	case !found:
		return Size{}, false, nil
	case o.Ignored != "":
		return Size{}, false, errors.New(o.Via + ": " + o.Ignored)
	}
	return Size{o.MilliCPU, o.Source}, true, nil
}
