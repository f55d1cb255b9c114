package metadata

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// Size is a pod's real CPU size and where it came from.
type Size struct {
	MilliCPU int64
	// Source: "neonvm", "kubevirt", "annotation", "requests", "limits".
	Source string
}

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

// Origin says where the declared size of pod uid comes from, or why it
// is not believed (see Trust): a VM object whose status names the pod,
// else a VM the pod only claims, else a NeonVM runner's -vmspec, else the
// cgwarden.io/cpu annotation. ok is false when nothing declares a size.
func (s *Set) Origin(uid string) (o Origin, ok bool) {
	if s == nil {
		return Origin{}, false
	}
	p, found := s.byUID[uid]
	if sz, ok := s.sizes[uid]; ok {
		o = Origin{Source: sz.Source, Via: "VM object " + s.via[uid] + " (its status names the pod)", DeclaredMilliCPU: sz.MilliCPU}
		ns := ""
		if found {
			ns = p.Namespace
		}
		return s.trust.take(ns, o), true
	}
	if !found {
		return Origin{}, false
	}
	if c, found := s.claims[uid]; found {
		o = Origin{Source: c.vm.Kind, Via: fmt.Sprintf("VM object %s (claimed by the pod's %s)", c.vm.ID(), c.how), DeclaredMilliCPU: c.vm.MilliCPU}
		if s.trust.PodClaims && !c.second {
			o.Trusted = s.trust.TrustedBy
			return s.trust.take(p.Namespace, o), true
		}
		o.Ignored = "not believed: " + c.why + "; the API server checks no pod's ownerReferences or labels"
		return o, true
	}
	var runner Origin
	if p.VMSize != nil {
		runner = Origin{Source: p.VMSize.Source, Via: "the runner's -vmspec", DeclaredMilliCPU: p.VMSize.MilliCPU}
		if s.trust.PodClaims {
			runner.Trusted = s.trust.TrustedBy
			return s.trust.take(p.Namespace, runner), true
		}
		runner.Ignored = "not believed: a pod's own arguments are not its size; no VM object's status names the pod"
	}
	a, found := p.Annotation[vmsize.AnnotationCPU]
	if !found {
		// A runner's -vmspec not believed, or nothing at all.
		return runner, p.VMSize != nil
	}
	o = Origin{Source: "annotation", Via: fmt.Sprintf("annotation %s=%q", vmsize.AnnotationCPU, a)}
	m, err := vmsize.Quantity(a)
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
	return s.trust.take(p.Namespace, o), true
}

// take checks a stated size for a pod of namespace ns and caps it at the
// lower of the node's allocatable CPU and the namespace's --max-size
// bound (vmsize.Bound.Limit, as the sizer caps its requests).
func (t Trust) take(ns string, o Origin) Origin {
	m := o.DeclaredMilliCPU
	if err := vmsize.Check(m); err != nil {
		o.Ignored = err.Error()
		return o
	}
	o.MilliCPU = m
	bound := t.MaxSizes.For(ns)
	limit, byNamespace := bound.Limit(t.AllocatableMilliCPU)
	if limit > 0 && m > limit {
		what := "the node's allocatable CPU"
		if byNamespace {
			what = bound.String()
		}
		o.MilliCPU = limit
		o.Capped = fmt.Sprintf("capped at %s (%sm, declared %sm)", what, strconv.FormatInt(limit, 10), strconv.FormatInt(m, 10))
	}
	return o
}

// neonVMOwner is the pod's NeonVM VirtualMachine owner reference, if any.
func (p *Pod) neonVMOwner() *Owner {
	for i, o := range p.Owners {
		if vmsize.OwnerKind(o.APIVersion, o.Kind) == vmsize.NeonVM && o.Name != "" {
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

// DeclaredSize is the size the VM weights fix sizes a BestEffort pod by:
// its Origin, when taken. Unlike Size it never falls back to limits or
// requests: a pod that has them is not BestEffort, and the kubelet already
// weighs it from its requests. ok is false when nothing declares a size;
// err says why a declared size is refused (not trusted, not a quantity,
// zero, negative, or above vmsize.MaxMilliCPU), and then ok is false too.
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
