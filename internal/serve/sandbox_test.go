package serve

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	statsv1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// The kubelet lists only a pod's declared containers: the sandbox (pause)
// container's usage counts in the pod's figures, never as a container of
// its own. Seed: a node of the cgroupfs-v1-containerd example, whose pods
// each have a pause container cgroup the pods file does not name (and,
// from the CRI, one named as the pod's sandbox).
func TestSandboxesAreNotContainers(t *testing.T) {
	pods, err := metadata.ReadPodsFile("../examples/snapshots/cgroupfs-v1-containerd.pods.json")
	if err != nil {
		t.Fatal(err)
	}
	for name, meta := range map[string]*metadata.Set{"pods file": metadata.NewSet(pods)} {
		s := feedExample(t, "cgroupfs-v1-containerd", meta)
		_, body, _ := get(t, s.Handler(), "/stats/summary")
		var sum statsv1.Summary
		if err := json.Unmarshal([]byte(body), &sum); err != nil {
			t.Fatal(err)
		}
		hexName := regexp.MustCompile(`^[0-9a-f]{64}$`)
		declared := map[string]bool{}
		for _, p := range pods {
			for _, c := range p.Containers {
				declared[p.UID+"/"+c.Name] = true
			}
		}
		n := 0
		for _, p := range sum.Pods {
			for _, c := range p.Containers {
				n++
				if hexName.MatchString(c.Name) || !declared[p.PodRef.UID+"/"+c.Name] {
					t.Errorf("%s: /stats/summary lists container %q of pod %s, which the pod does not declare", name, c.Name, p.PodRef.Name)
				}
			}
		}
		if n == 0 {
			t.Fatalf("%s: no container in /stats/summary at all", name)
		}
		_, res, _ := get(t, s.Handler(), "/metrics/resource")
		for _, l := range strings.Split(res, "\n") {
			if strings.HasPrefix(l, "container_") && regexp.MustCompile(`container="[0-9a-f]{64}"`).MatchString(l) {
				t.Errorf("%s: /metrics/resource has a sandbox as a container: %s", name, l)
			}
		}
	}
}
