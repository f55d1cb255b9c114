package plan

import (
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/inventory"
)

// TestPodNarrowingIsOnePod: --pod narrows a plan to one pod. A bare name
// that two namespaces use (or "/", the namespace/name of every pod
// without metadata) must not quietly widen it to several.
func TestPodNarrowingIsOnePod(t *testing.T) {
	n, sc := seed003(t)
	first := n.Pods[0]
	first.Name, first.Namespace = "web", "shop"
	n.Pods = append(n.Pods, &inventory.Pod{UID: "11111111-2222-3333-4444-555555555555", Name: "web", Namespace: "blog"},
		&inventory.Pod{UID: "66666666-7777-8888-9999-000000000000"}, &inventory.Pod{UID: "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"})
	if _, _, err := Adopt(Input{Node: n, Places: sc.Places, FS: sc.FS, Pod: "web"}); err == nil || !strings.Contains(err.Error(), "more than one pod") {
		t.Errorf("--pod web in two namespaces: err = %v, want an error naming the ambiguity", err)
	}
	if p, _, err := Adopt(Input{Node: n, Places: sc.Places, FS: sc.FS, Pod: "/"}); err == nil {
		t.Errorf("--pod / was taken for the pods without a name: %+v", p)
	}
	for _, pod := range []string{"shop/web", first.UID} {
		if p, _, err := Adopt(Input{Node: n, Places: sc.Places, FS: sc.FS, Pod: pod}); err != nil || len(p.Ops) == 0 {
			t.Errorf("--pod %q: %v, %v; want the seed pod's plan", pod, p, err)
		}
	}
}
