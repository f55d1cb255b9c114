package hold_test

import (
	"context"
	"testing"

	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// fixedPods lists the same slice every time, as an informer does while
// nothing changes.
type fixedPods []metadata.Pod

func (p fixedPods) Pods(context.Context) ([]metadata.Pod, error) { return p, nil }

// TestMetaSourceNodeInfo: the Node's info reaches the set (for the
// audit's node header), a new runtime builds a new set, and nothing
// changed returns the very same one.
func TestMetaSourceNodeInfo(t *testing.T) {
	info := metadata.NodeInfo{ContainerRuntimeVersion: "containerd://2.4.2"}
	src := &hold.MetaSource{Lister: fixedPods{{UID: "p1"}}, NodeInfo: func() metadata.NodeInfo { return info }}
	ctx := context.Background()
	s1, err := src.Sizes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := s1.NodeInfo(); got != info {
		t.Errorf("set's node info %+v, want %+v", got, info)
	}
	if s2, _ := src.Sizes(ctx); s2 != s1 {
		t.Error("Sizes built a new set with nothing changed")
	}
	info.ContainerRuntimeVersion = "containerd://2.5.0"
	s3, _ := src.Sizes(ctx)
	if s3 == s1 || s3.NodeInfo() != info {
		t.Errorf("after the runtime's upgrade: %+v (same set: %v)", s3.NodeInfo(), s3 == s1)
	}
	none, _ := (&hold.MetaSource{Lister: fixedPods{}}).Sizes(ctx)
	if got := none.NodeInfo(); got != (metadata.NodeInfo{}) {
		t.Errorf("without NodeInfo: %+v, want unknown", got)
	}
}
