package deploytest

import (
	"strings"
	"testing"
)

// The size policy (docs/security.md, "Trusted sizes"): off by default;
// with sizePolicy.enabled the chart adds exactly the objects of the
// kustomize size-policy directory, and leaves the agent's alone.
func TestChartAndKustomizeAgreeOnSizePolicy(t *testing.T) {
	isPolicy := func(o object) bool {
		md, _ := o["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		return strings.HasPrefix(name, "cgwarden-size-")
	}
	for _, o := range helm(t, nil) {
		if isPolicy(o) {
			t.Errorf("size policy object %s rendered with sizePolicy.enabled unset", o.key())
		}
	}
	var pol, rest []object
	for _, o := range helm(t, map[string]any{"sizePolicy": map[string]any{"enabled": true}}) {
		if isPolicy(o) {
			pol = append(pol, o)
		} else {
			rest = append(rest, o)
		}
	}
	if len(pol) != 6 {
		t.Errorf("%d size policy objects, want the two policies, their bindings, the agent's ClusterRole and its binding", len(pol))
	}
	same(t, "size policy", pol, kustomize(t, "size-policy"))
	same(t, "agent beside the size policy", rest, kustomize(t, "base"))
}
