package metadata

import "fmt"

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

// Size is a pod's declared size: a VM's size (from a VMs file, else from
// the pod's own runner arguments), else the cgwarden.io/cpu
// annotation, else its CPU limits, else its CPU requests. ok is false when
// nothing declares one.
func (s *Set) Size(uid string) (Size, bool) {
	if s == nil {
		return Size{}, false
	}
	if sz, ok := s.sizes[uid]; ok {
		return sz, true
	}
	p, ok := s.byUID[uid]
	if !ok {
		return Size{}, false
	}
	if p.VMSize != nil {
		return *p.VMSize, true
	}
	if a, ok := p.Annotation[AnnotationCPU]; ok {
		if m, err := Quantity(a); err == nil && m > 0 {
			return Size{m, "annotation"}, true
		}
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
// its VM's size (a VMs file, else the NeonVM runner's own -vmspec), else
// the cgwarden.io/cpu annotation. Unlike Size it never falls back to
// limits or requests: a pod that has them is not BestEffort, and the
// kubelet already weighs it from its requests. ok is false when nothing
// declares a size; err says why a declared size is refused (not a
// quantity, zero, negative, or above MaxSizeMilliCPU), and then ok is false
// too.
func (s *Set) DeclaredSize(uid string) (sz Size, ok bool, err error) {
	if s == nil {
		return Size{}, false, nil
	}
	check := func(sz Size, what string) (Size, bool, error) {
		switch {
		case sz.MilliCPU <= 0:
			return Size{}, false, fmt.Errorf("%s is %dm: a size must be above 0", what, sz.MilliCPU)
		case sz.MilliCPU > MaxSizeMilliCPU:
			return Size{}, false, fmt.Errorf("%s is %dm: above %d CPUs, which no node has", what, sz.MilliCPU, MaxSizeMilliCPU/1000)
		}
		return sz, true, nil
	}
	if sz, found := s.sizes[uid]; found {
		return check(sz, "the "+sz.Source+" VM's CPU size")
	}
	p, found := s.byUID[uid]
	if !found {
		return Size{}, false, nil
	}
	if p.VMSize != nil {
		return check(*p.VMSize, "the VM size in the runner's -vmspec")
	}
	a, found := p.Annotation[AnnotationCPU]
	if !found {
		return Size{}, false, nil
	}
	m, err := Quantity(a)
	if err != nil {
		return Size{}, false, fmt.Errorf("annotation %s=%q: %w", AnnotationCPU, a, err)
	}
	return check(Size{m, "annotation"}, fmt.Sprintf("annotation %s=%q", AnnotationCPU, a))
}
