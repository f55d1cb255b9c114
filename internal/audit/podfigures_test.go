package audit

import (
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/inventory"
)

// TestPodFiguresSaysWhatIsMissing: a pod whose only container is misplaced
// reads 0 at the kubelet (seed 003); a pod with another container inside
// its cgroup reads that one's figures, without the misplaced processes.
func TestPodFiguresSaysWhatIsMissing(t *testing.T) {
	misplaced := &inventory.Container{ID: "a", Misplaced: true}
	alone := &inventory.Pod{Containers: []*inventory.Container{misplaced, {ID: "a", Leftover: true}, {ID: "s", Sandbox: true}}}
	if got := podFigures(alone); !strings.Contains(got, "0 CPU and 0 memory") {
		t.Errorf("pod with only a misplaced container: %q", got)
	}
	mixed := &inventory.Pod{Containers: []*inventory.Container{misplaced, {ID: "b"}}}
	if got := podFigures(mixed); strings.Contains(got, "0 CPU") || !strings.Contains(got, "leave these processes out") {
		t.Errorf("pod with a placed container too: %q", got)
	}
}
