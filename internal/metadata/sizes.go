package metadata

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
