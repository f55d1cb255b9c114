package metadata

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
)

// Filter selects pods as kubectl's -n, pod names and -l do. The zero
// Filter selects every pod. A pod whose metadata is unknown (shown by
// UID) has no namespace and no labels: only its UID can select it.
type Filter struct {
	// Namespace is the only namespace selected; "" for all.
	Namespace string
	// Names are the pod names (or UIDs) selected; none for all.
	Names []string
	// Selector selects by pod labels; nil for all.
	Selector labels.Selector
}

// NewFilter builds a filter; selector is a label selector in kubectl's
// syntax (app=web,tier!=db, env in (a,b)).
func NewFilter(namespace string, names []string, selector string) (*Filter, error) {
	f := &Filter{Namespace: namespace, Names: names}
	if selector != "" {
		s, err := labels.Parse(selector)
		if err != nil {
			return nil, fmt.Errorf("--selector %q: %w", selector, err)
		}
		f.Selector = s
	}
	return f, nil
}

// Active says whether the filter leaves any pod out.
func (f *Filter) Active() bool {
	return f != nil && (f.Namespace != "" || len(f.Names) > 0 || f.Selector != nil)
}

// Match says whether the pod with this UID, namespace and name is
// selected; meta gives its labels.
func (f *Filter) Match(uid, namespace, name string, meta *Set) bool {
	if !f.Active() {
		return true
	}
	if f.Namespace != "" && namespace != f.Namespace {
		return false
	}
	if len(f.Names) > 0 && !slices.Contains(f.Names, name) && !slices.Contains(f.Names, uid) {
		return false
	}
	if f.Selector != nil {
		var l map[string]string
		if p, ok := meta.Pod(uid); ok {
			l = p.Labels
		}
		if !f.Selector.Matches(labels.Set(l)) {
			return false
		}
	}
	return true
}
