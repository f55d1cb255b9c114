package audit

import (
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/rules"
)

// TestKataSandboxesWithoutTheirPod: Kata with sandbox_cgroup_only=false
// leaves kata_<sandbox id> beside the pod cgroups and its overhead in
// /kata_overhead (DESIGN.md's known misplaced shapes). `kubectl get pods`
// lists no sandbox IDs, so from a pods file (or none) they name no pod; the
// audit must still report them, not drop them silently.
func TestKataSandboxesWithoutTheirPod(t *testing.T) {
	sbx := strings.Repeat("6a", 32)
	be := "/kubepods.slice/kubepods-besteffort.slice"
	kata := be + "/kata_" + sbx
	n := v2Node(t, nil,
		cg{path: "/kubepods.slice", weight: 100},
		cg{path: be, weight: 1},
		cg{path: be + "/kubepods-besteffort-pod" + under(uidA) + ".slice", weight: 1},
		cg{path: kata, weight: 100, procs: 3, used1: 0, used2: 500000},
		cg{path: "/kata_overhead", weight: 100},
		cg{path: "/kata_overhead/" + sbx, weight: 100, procs: 1, used1: 0, used2: 100000},
	)
	r := Run(&Input{Node: n})
	for _, path := range []string{kata, "/kata_overhead"} {
		f, ok := find(r, rules.MisplacedContainer, func(f Finding) bool { return f.Subject.Cgroup == path })
		if !ok {
			t.Errorf("no misplaced-container finding for %s; findings: %v", path, ruleIDs(r))
			continue
		}
		if p, _ := f.Evidence.Get("processes"); p == nil || p.(int) == 0 {
			t.Errorf("%s: processes %v, want those the cgroup holds", path, p)
		}
	}
}
