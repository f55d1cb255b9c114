package audit

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/rules"
)

// A tier or pod whose weight file could not be read has an unknown
// weight: the starvation evidence must say so, not print 0 (unknown is
// not zero).
func TestStarvationUnknownWeightIsNotZero(t *testing.T) {
	be := "/kubepods.slice/kubepods-besteffort.slice"
	pod := be + "/kubepods-besteffort-pod" + under(uidA) + ".slice"
	n := v2Node(t, nil,
		cg{path: "/kubepods.slice", weight: 100},
		cg{path: be, weight: 1},
		cg{path: "/kubepods.slice/kubepods-burstable.slice", weight: 5000},
		cg{path: pod, weight: 1},
	)
	n.Find(be).Stats.CPU.Weight = nil // as when cpu.weight was unreadable
	n.Find(pod).Stats.CPU.Weight = nil
	f, ok := find(Run(&Input{Node: n}), rules.BestEffortStarvation, func(f Finding) bool { return f.Subject.PodUID == uidA })
	if !ok {
		t.Fatal("no besteffort-starvation finding")
	}
	if strings.Contains(f.Evidence.Summary, "cpu.weight 0 ") || strings.Contains(f.Evidence.Summary, "pod weight 0 ") ||
		strings.Contains(f.Brief, "weight 0,") || strings.Contains(f.Brief, "tier 0 ") {
		t.Errorf("unknown weight shown as 0:\n%s\n%s", f.Evidence.Summary, f.Brief)
	}
	b, err := json.Marshal(f.Evidence)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"tierWeight":0`) || strings.Contains(string(b), `"podWeight":0`) {
		t.Errorf("unknown weight as 0 in the JSON evidence: %s", b)
	}
}
