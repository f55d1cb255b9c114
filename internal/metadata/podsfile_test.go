package metadata

import (
	"os"
	"strings"
	"testing"
)

func TestParsePods(t *testing.T) {
	pods, err := ReadPodsFile("testdata/pods.json")
	if err != nil {
		t.Fatal(err)
	}
	set := NewSet(pods)
	if set.Len() != 3 {
		t.Fatalf("%d pods, want 3", set.Len())
	}
	p, ok := set.Pod("050b4a85-f401-4ddb-a585-3d2120ee0132")
	if !ok || p.QoS != "burstable" || *p.RequestMilliCPU != 270 || *p.LimitMilliCPU != 0 {
		t.Fatalf("burstable pod = %+v", p)
	}
	if c, ok := set.ByContainer(strings.Repeat("a", 64)); !ok || c != p || p.ContainerName(strings.Repeat("a", 64)) != "compute" {
		t.Fatal("container ID lookup failed")
	}
	if p.Containers[0].StartTime.IsZero() {
		t.Fatal("container start time lost")
	}
	// No qosClass in the status: computed by the kubelet's rule.
	g, _ := set.Pod("cb6dc9c2-eda7-4e8a-8e4a-948169e57cdc")
	if g.QoS != "guaranteed" || *g.LimitMilliCPU != 2000 {
		t.Fatalf("guaranteed pod = %+v", g)
	}
	vm, _ := set.ByName("default/compute-vm-runner")
	if vm == nil || vm.QoS != "besteffort" {
		t.Fatalf("VM runner pod = %+v", vm)
	}
	// Sizes: the annotation for the VM runner, limits for the guaranteed
	// pod, requests for the burstable one.
	for uid, want := range map[string]Size{
		vm.UID: {4000, "annotation"}, g.UID: {2000, "limits"}, p.UID: {270, "requests"},
	} {
		if got, ok := set.Size(uid); !ok || got != want {
			t.Errorf("Size(%s) = %+v, %v; want %+v", uid, got, ok, want)
		}
	}
	if _, ok := set.Size("nope"); ok {
		t.Error("size of an unknown pod")
	}
}

func TestParsePodsRejects(t *testing.T) {
	for name, in := range map[string]string{
		"not json":   "kind: List",
		"wrong kind": `{"kind":"NodeList","items":[]}`,
		"no uid":     `{"kind":"List","items":[{"kind":"Pod","metadata":{"name":"x"}}]}`,
		"not a pod":  `{"kind":"List","items":[{"kind":"Node","metadata":{"name":"x","uid":"u"}}]}`,
	} {
		if _, err := ParsePods(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), "pods file") {
			t.Errorf("%s: err = %v, want a pods file error", name, err)
		}
	}
}

func TestReadPodsFileNamesTheFile(t *testing.T) {
	bad := t.TempDir() + "/pods.json"
	if err := os.WriteFile(bad, []byte("kind: List"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPodsFile(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("malformed file: %v, want an error naming %s", err, bad)
	}
	if _, err := ReadPodsFile(bad + ".missing"); err == nil {
		t.Error("missing file accepted")
	}
}

func TestNilSet(t *testing.T) {
	var s *Set
	if _, ok := s.Pod("x"); ok || s.Len() != 0 || s.Pods() != nil {
		t.Fatal("nil set answered")
	}
}
