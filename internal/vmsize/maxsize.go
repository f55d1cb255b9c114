package vmsize

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// AnyNamespace in --max-size bounds every namespace the flag does not
// name.
const AnyNamespace = "*"

// MaxSizes is --max-size: the upper bound a cluster administrator sets on
// the sizes believed for the pods of each namespace (issue 38). The agent
// (metadata.Trust, where the node's allocatable CPU caps sizes) and the
// sizer (its requests at admission and at resize) both read the bound of
// a pod's namespace from here (For, Bound.Limit), so they clamp alike.
//
// The zero MaxSizes bounds nothing. A MaxSizes is immutable and
// comparable: copies of one parse are equal (metadata.Trust is compared to
// tell whether the sizes must be decided again).
type MaxSizes struct{ p *maxSizes }

type maxSizes struct {
	byNamespace map[string]int64
	// any is the bound of every namespace not named (0: none).
	any int64
	// text is the canonical form: entries sorted, quantities as
	// FormatMilli writes them.
	text string
}

// ParseMaxSizes reads --max-size: NAMESPACE=CPU entries separated by
// commas, NAMESPACE a namespace's name or "*" for every namespace not
// named, CPU a Kubernetes CPU quantity ("8", "2500m") above 0 and at most
// MaxMilliCPU. "" (or only spaces) bounds nothing. The flag is the
// operator's; its errors say which entry is wrong and why.
func ParseMaxSizes(s string) (MaxSizes, error) {
	if strings.TrimSpace(s) == "" {
		return MaxSizes{}, nil
	}
	m := &maxSizes{byNamespace: map[string]int64{}}
	seen := map[string]bool{}
	var entries []string
	for i, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			return MaxSizes{}, fmt.Errorf("entry %d is empty: want NAMESPACE=CPU[,NAMESPACE=CPU...]", i+1)
		}
		ns, q, ok := strings.Cut(e, "=")
		ns, q = strings.TrimSpace(ns), strings.TrimSpace(q)
		switch {
		case !ok:
			return MaxSizes{}, fmt.Errorf("entry %.80q: want NAMESPACE=CPU (a namespace or *, an equals sign, a CPU quantity)", e)
		case ns == "":
			return MaxSizes{}, fmt.Errorf("entry %.80q names no namespace: want NAMESPACE=CPU, or *=CPU for every namespace not named", e)
		case q == "":
			return MaxSizes{}, fmt.Errorf("entry %.80q gives no CPU quantity", e)
		case ns != AnyNamespace:
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return MaxSizes{}, fmt.Errorf("entry %.80q: %.80q is not a namespace name (%s), nor * for every namespace not named", e, ns, strings.Join(errs, "; "))
			}
		}
		if seen[ns] {
			return MaxSizes{}, fmt.Errorf("namespace %s is bounded twice: one entry a namespace", ns)
		}
		seen[ns] = true
		milli, err := Quantity(q)
		if err != nil {
			return MaxSizes{}, fmt.Errorf("entry %.80q: %w", e, err)
		}
		if err := Check(milli); err != nil {
			return MaxSizes{}, fmt.Errorf("entry %.80q: bound %w", e, err)
		}
		if ns == AnyNamespace {
			m.any = milli
		} else {
			m.byNamespace[ns] = milli
		}
		entries = append(entries, ns+"="+FormatMilli(milli))
	}
	slices.Sort(entries)
	m.text = strings.Join(entries, ",")
	return MaxSizes{m}, nil
}

// String is the canonical form of the flag ("*=8,tenant=2"); "" when it
// bounds nothing.
func (m MaxSizes) String() string {
	if m.p == nil {
		return ""
	}
	return m.p.text
}

// For is the bound of namespace ns: its own entry, else the "*" entry;
// the zero Bound when neither.
func (m MaxSizes) For(ns string) Bound {
	if m.p == nil {
		return Bound{}
	}
	if milli, ok := m.p.byNamespace[ns]; ok {
		return Bound{MilliCPU: milli, Namespace: ns, Entry: ns + "=" + FormatMilli(milli)}
	}
	if m.p.any > 0 {
		return Bound{MilliCPU: m.p.any, Namespace: ns, Entry: AnyNamespace + "=" + FormatMilli(m.p.any)}
	}
	return Bound{}
}

// Bound is the upper bound --max-size sets on the sizes of one
// namespace's pods.
type Bound struct {
	// MilliCPU is the bound; 0: none.
	MilliCPU int64
	// Namespace is the pod's namespace; Entry the flag's entry that
	// bounds it ("tenant=2", or "*=8" for a namespace not named).
	Namespace, Entry string
}

// String names the bound for the reasons the agent and the sizer give:
// "namespace tenant's --max-size bound tenant=2".
func (b Bound) String() string {
	if b.Namespace == "" {
		return "the --max-size bound " + b.Entry
	}
	return "namespace " + b.Namespace + "'s --max-size bound " + b.Entry
}

// Limit is the lower of the bound and a node's allocatable CPU (alloc; 0:
// unknown), what a size is clamped to (0: neither holds), and whether the
// namespace's bound is the one that holds (a tie is the node's: no node
// can give more).
func (b Bound) Limit(alloc int64) (limit int64, byNamespace bool) {
	switch {
	case b.MilliCPU > 0 && (alloc <= 0 || b.MilliCPU < alloc):
		return b.MilliCPU, true
	case alloc > 0:
		return alloc, false
	}
	return 0, false
}

// FormatMilli writes milli-CPU as the API server would ("1", "1500m").
func FormatMilli(m int64) string {
	if m%1000 == 0 {
		return strconv.FormatInt(m/1000, 10)
	}
	return strconv.FormatInt(m, 10) + "m"
}
