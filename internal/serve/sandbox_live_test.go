package serve_test

import (
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// A misplaced sandbox on the live kernel: the runtime put the pod's
// sandbox (pause) cgroup outside the pod too, as a literal
// "<slice>:cri-containerd:<sandbox id>" directory (a runwasi-style shim
// can), while the app container is in place. The sandbox is no container:
// it is in no container list of /stats/summary or /metrics/resource, and
// its usage counts in the pod's figures, whether the metadata names the
// sandbox (the CRI's ListPodSandbox) or only lists the containers (the API
// server's containerStatuses, which never name the sandbox).
func TestLiveMisplacedSandboxIsNotAContainer(t *testing.T) {
	const sandbox = "9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0"
	for name, pod := range map[string]metadata.Pod{
		"CRI":        {UID: liveUID, Name: "web", Namespace: "default", SandboxID: sandbox, Containers: []metadata.Container{{Name: "app", ID: liveCtr}}},
		"API server": {UID: liveUID, Name: "web", Namespace: "default", Containers: []metadata.Container{{Name: "app", ID: liveCtr}}},
	} {
		t.Run(name, func(t *testing.T) {
			s := realtest.NewScratch(t)
			s.Mkdir("kubepods.slice")
			s.Mkdir("kubepods.slice/" + liveSlice)
			s.Mkdir("kubepods.slice/" + liveSlice + "/cri-containerd-" + liveCtr + ".scope")
			misplaced := liveSlice + ":cri-containerd:" + sandbox
			s.Mkdir(misplaced)
			r := runLiveWith(t, s, misplaced, metadata.NewSet([]metadata.Pod{pod}))

			if len(r.second.Foreign) != 0 {
				t.Errorf("the sandbox was taken for a foreign cgroup: %v", r.second.Foreign)
			}
			sp := summaryPod(t, r.summary, liveUID)
			var names []string
			for _, c := range sp.Containers {
				names = append(names, c.Name)
			}
			if strings.Join(names, ",") != "app" {
				t.Errorf("/stats/summary lists containers %q, want only app (the kubelet's list)", names)
			}
			for fam, mf := range r.res2 {
				if !strings.HasPrefix(fam, "container_") {
					continue
				}
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "container" && l.GetValue() != "app" {
							t.Errorf("/metrics/resource %s has container %q", fam, l.GetValue())
						}
					}
				}
			}
			if sp.CPU == nil || sp.CPU.UsageNanoCores == nil || !within(float64(*sp.CPU.UsageNanoCores)/1e9, r.procCores, 0.10) {
				t.Errorf("summary pod usageNanoCores %v, the sandbox's processes used %.3f cores", sp.CPU, r.procCores)
			}
			if sp.Memory == nil || sp.Memory.WorkingSetBytes == nil || *sp.Memory.WorkingSetBytes < memMiB<<20 {
				t.Errorf("summary pod memory %+v, want at least the sandbox's %d MiB", sp.Memory, memMiB)
			}
		})
	}
}
