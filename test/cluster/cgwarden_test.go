package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// buildCgwarden builds cgwarden from the parent module (once per test
// process: buildOnce).
func buildCgwarden(t *testing.T) string { return buildBinary(t, "cgwarden") }

// buildSizer builds cgwarden-sizer, the sizer's own binary, from the
// parent module (once per test process).
func buildSizer(t *testing.T) string { return buildBinary(t, "cgwarden-sizer") }

// buildBinary builds ../../cmd/name once per test process (buildOnce).
func buildBinary(t *testing.T, name string) string {
	t.Helper()
	bin, err := buildOnce(name, func(dir string) (string, error) {
		bin := filepath.Join(dir, name)
		build := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
		build.Dir = "../.."
		if out, err := build.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building %s: %v\n%s", name, err, out)
		}
		return bin, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// cgwarden inspect, on the live node with the pods file from the API
// server, finds the pod the real kubelet and runc placed: its cgroup, QoS
// tier, name, and its container by the containerd ID in the pod's status.
// Only the fields of DESIGN.md's JSON contract are checked.
func TestCgwardenInspectsTheRealNode(t *testing.T) {
	e := cluster(t)
	bin := buildCgwarden(t)
	ns := e.namespace(t)
	pod := e.runPod(t, ns, "inspected", "exec sleep 3600")
	ctrID := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")

	podsFile := filepath.Join(t.TempDir(), "pods.json")
	out, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "get", "pods", "-A", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl get pods: %v", err)
	}
	if err := os.WriteFile(podsFile, out, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "inspect", "-o", "json", "--interval", "0", "--pods", podsFile)
	cmd.Stderr = os.Stderr
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("cgwarden inspect: %v", err)
	}
	var got struct {
		Node struct {
			CgroupVersion string `json:"cgroupVersion"`
			Driver        string `json:"driver"`
		} `json:"node"`
		Pods []struct {
			UID, QoS, Name, Namespace, Cgroup string
			CPU                               struct{ Weight int64 } `json:"cpu"`
			Containers                        []struct {
				ID, Runtime, Cgroup string
				Misplaced           bool
			}
		} `json:"pods"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("cgwarden inspect -o json: %v\n%s", err, out)
	}
	if got.Node.Driver != "cgroupfs" {
		t.Errorf("node driver %q, want cgroupfs", got.Node.Driver)
	}
	found := false
	for _, p := range got.Pods {
		if p.UID != string(pod.UID) {
			continue
		}
		found = true
		if !strings.EqualFold(p.QoS, "besteffort") || p.Name != "inspected" || p.Namespace != ns {
			t.Errorf("pod: qos %q name %q namespace %q; want besteffort, inspected, %s", p.QoS, p.Name, p.Namespace, ns)
		}
		if want := "/kubepods/besteffort/pod" + string(pod.UID); p.Cgroup != want {
			t.Errorf("pod cgroup %q, want %q", p.Cgroup, want)
		}
		if p.CPU.Weight != 2 && got.Node.CgroupVersion == "v1" {
			t.Errorf("BestEffort pod cpu.shares %d, want 2 (the kubelet's value)", p.CPU.Weight)
		}
		ok := false
		for _, c := range p.Containers {
			if c.Misplaced {
				t.Errorf("container %s reported misplaced at %s", c.ID, c.Cgroup)
			}
			if c.ID == ctrID {
				ok = true
				if c.Runtime != "containerd" {
					t.Errorf("container runtime %q, want containerd", c.Runtime)
				}
			}
		}
		if !ok {
			t.Errorf("container %s (from the pod's status) not among %+v", ctrID, p.Containers)
		}
	}
	if !found {
		t.Fatalf("pod %s/%s (uid %s) not in cgwarden inspect:\n%s", ns, "inspected", pod.UID, out)
	}
}

// The kubelet puts the BestEffort tier back at its minimum weight when
// something else raised it (its QoS update runs about every minute and on
// pod start and stop). cgwarden's holding of weights rests on this; here it
// is measured against the real kubelet. The tier is the test cluster's own
// cgroup.
func TestKubeletResetsBestEffortTier(t *testing.T) {
	cluster(t)
	root, wf := cgroupRoot()
	file := filepath.Join(root, "kubepods", "besteffort", wf)
	min, raised := "2", "5120"
	if wf == "cpu.weight" {
		min, raised = "1", "200"
	}
	// An earlier test (the agent in fix mode) may have left the tier
	// raised: the kubelet's own reset must bring it to the minimum first.
	poll.Until(t, 150*time.Second, file+" at the kubelet's minimum before the test", func() (bool, string, error) {
		v := strings.TrimSpace(readFile(t, file))
		return v == min, v, nil
	})
	t.Cleanup(func() { _ = os.WriteFile(file, []byte(min), 0o644) })
	if err := os.WriteFile(file, []byte(raised), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	poll.Until(t, 150*time.Second, "the kubelet resetting "+file, func() (bool, string, error) {
		v := strings.TrimSpace(readFile(t, file))
		return v == min, v, nil
	})
	t.Logf("%s: %s -> %s after %.0fs", file, raised, min, time.Since(start).Seconds())
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
