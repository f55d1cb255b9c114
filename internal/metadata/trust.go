package metadata

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// Trust says which declared sizes a Set believes, and caps them. A size
// buys CPU weight in fix mode, so it is taken only from what a cluster
// administrator controls (docs/security.md, "Trusted sizes"):
//   - a VM object (NeonVM VirtualMachine, KubeVirt VMI) matched to its pod
//     by the pod's owner reference or the VM's status (a pod that only
//     carries the VM's label is not believed: anyone can label a pod);
//   - a NeonVM runner's -vmspec argument, only on a pod owned
//     (ownerReferences) by a NeonVM VirtualMachine the Set knows exists;
//   - the cgwarden.io/cpu annotation, only in the namespaces Annotations
//     names — which the agent grants when its size policy (a
//     ValidatingAdmissionPolicy) is installed, or --trust-size-annotations
//     names them.
//
// Every size believed is capped at the node's allocatable CPU and at its
// namespace's --max-size bound.
//
// Trust is comparable: a source rebuilds its Set when the trust changes.
type Trust struct {
	// Annotations is the namespaces whose cgwarden.io/cpu annotations are
	// believed: "*" for all, else a sorted comma-separated list; "" none.
	Annotations string
	// TrustedBy says what makes those annotations trusted, for audit
	// ("--trust-size-annotations", "the size policy ... is installed").
	TrustedBy string
	// Untrusted says why the other annotations are not believed.
	Untrusted string
	// PodClaims believes what a pod says of itself: a NeonVM runner's
	// -vmspec without an existing VirtualMachine owner, and a VM's size
	// for a pod tied to the VM by its label only. For the operator's own
	// pods file only (podsource.Vouched: every command, serve included,
	// believes it alike).
	PodClaims bool
	// AllocatableMilliCPU caps every size: the node's allocatable CPU
	// (Node status.allocatable.cpu). 0 when unknown; AllocatableUnknown
	// then says why, and sizes are not capped (only vmsize.MaxMilliCPU holds).
	AllocatableMilliCPU int64
	AllocatableUnknown  string
	// MaxSizes bounds the sizes of each namespace's pods (--max-size, the
	// operator's): a size above its namespace's bound is capped at it, as
	// one above the allocatable CPU is (the lower of the two holds). The
	// zero MaxSizes bounds nothing, as for a pods file.
	MaxSizes vmsize.MaxSizes
}

// AllNamespaces in Trust.Annotations believes the annotation everywhere.
const AllNamespaces = "*"

// OperatorTrust is the trust of pod metadata the operator hands a command
// (a pods file, for every command that takes one: podsource.Vouched): the
// operator vouches for the file, so every annotation, every runner's
// -vmspec and every VM's label on a pod is believed. The node's allocatable CPU is not in a pods file:
// sizes are not capped, nor bounded by --max-size (the operator's file is
// the operator's word, as in every command that reads one).
func OperatorTrust(what string) Trust {
	return Trust{Annotations: AllNamespaces, TrustedBy: what, PodClaims: true,
		AllocatableUnknown: "the node's allocatable CPU is not in " + what}
}

// ParseNamespaces reads --trust-size-annotations: "*" or a comma-separated
// list of namespace names. It returns Trust.Annotations' form.
func ParseNamespaces(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", nil
	}
	if s == AllNamespaces {
		return AllNamespaces, nil
	}
	var out []string
	for _, ns := range strings.Split(s, ",") {
		ns = strings.TrimSpace(ns)
		if ns == AllNamespaces {
			return "", fmt.Errorf("namespaces %q: \"*\" stands alone (every namespace)", s)
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return "", fmt.Errorf("namespaces %q: %q is not a namespace name: %s", s, ns, strings.Join(errs, "; "))
		}
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ","), nil
}

// Merge believes the annotations of both: a flag's namespaces and a
// policy's "*".
func (t Trust) Merge(annotations, by string) Trust {
	switch {
	case annotations == "":
		return t
	case t.Annotations == "" || annotations == AllNamespaces:
		t.Annotations, t.TrustedBy = annotations, by
		return t
	case t.Annotations == AllNamespaces:
		return t
	}
	all := append(strings.Split(t.Annotations, ","), strings.Split(annotations, ",")...)
	slices.Sort(all)
	t.Annotations = strings.Join(slices.Compact(all), ",")
	t.TrustedBy += "; " + by
	return t
}

// annotationTrusted says whether the annotation of a pod in namespace ns
// is believed.
func (t Trust) annotationTrusted(ns string) bool {
	if t.Annotations == AllNamespaces {
		return true
	}
	return t.Annotations != "" && slices.Contains(strings.Split(t.Annotations, ","), ns)
}

// SetTrust sets what the Set believes (NewSet's default: OperatorTrust of
// "the pod metadata given").
func (s *Set) SetTrust(t Trust) {
	if s != nil {
		s.trust = t
	}
}

// Trust is what the Set believes.
func (s *Set) Trust() Trust {
	if s == nil {
		return Trust{}
	}
	return s.trust
}
