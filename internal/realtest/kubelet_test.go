package realtest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// nodeFiles is the node guest's overlay (scripts/vmtest --node copies it
// over the guest's root).
const nodeFiles = "../../scripts/vmtest.d/systemd/node"

// The node guest's static pods decode strictly into v1 Pods (a misspelt
// field would be dropped by a lenient decoder and show up only minutes
// into a guest's boot), StaticPodNames' reading of them agrees with the
// decoding, and the kubelet's configuration says what the tests rely on.
// (Its own type, k8s.io/kubelet/config/v1beta1, needs
// k8s.io/component-base, which this module does not link.)
func TestNodeGuestFilesDecode(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(nodeFiles, "etc/kubernetes/kubelet-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kc struct {
		Kind                     string `json:"kind"`
		CgroupDriver             string `json:"cgroupDriver"`
		StaticPodPath            string `json:"staticPodPath"`
		ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
	}
	if err := yaml.Unmarshal(b, &kc); err != nil {
		t.Fatalf("kubelet-config.yaml: %v", err)
	}
	if kc.CgroupDriver != "systemd" || kc.StaticPodPath != StaticPodDir || kc.ContainerRuntimeEndpoint != "unix://"+ContainerdSocket {
		t.Errorf("kubelet config: driver %q, static pods %q, runtime %q", kc.CgroupDriver, kc.StaticPodPath, kc.ContainerRuntimeEndpoint)
	}
	files, err := filepath.Glob(filepath.Join(nodeFiles, "etc/kubernetes/manifests/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no static pods: %v", err)
	}
	var want []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var p corev1.Pod
		if err := yaml.UnmarshalStrict(b, &p); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !p.Spec.HostNetwork {
			t.Errorf("%s: not on the host network (the guest's only CNI network is loopback)", f)
		}
		want = append(want, p.Namespace+"/"+p.Name+"-vmtest-systemd")
		if got := yamlField(string(b), "name"); got != p.Name {
			t.Errorf("%s: yamlField name %q, decoded %q", f, got, p.Name)
		}
	}
	// StaticPodNames reads the guest's path; read this tree's instead.
	k := Kubelet{NodeName: "vmtest-systemd"}
	got, err := k.staticPodNames(filepath.Join(nodeFiles, "etc/kubernetes/manifests"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("static pod names %v, want %v", got, want)
	}
}
