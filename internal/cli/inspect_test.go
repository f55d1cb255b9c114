package cli

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/inspect"
)

// inspectExamples are the embedded snapshots whose inspect output is kept
// as golden files (testdata/golden/inspect-<name>[-pods].{txt,json}).
var inspectExamples = []string{"cgroupfs-v1-containerd", "cgroupfs-v2-crio", "seed-000-eks-neonvm", "seed-003-k3s-spin"}

func TestInspectGolden(t *testing.T) {
	// A 120-column terminal: long cgroup names are shortened in the
	// middle (-o wide keeps them whole: inspect_output_test.go).
	t.Setenv("COLUMNS", "120")
	for _, name := range inspectExamples {
		podsFile := "../examples/snapshots/" + name + ".pods.json"
		if _, err := os.Stat(podsFile); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, withPods := range []bool{false, true} {
			for _, format := range []string{"text", "json"} {
				args := []string{"inspect", "--snapshot", "example:" + name, "-o", format}
				file := "inspect-" + name
				if withPods {
					args = append(args, "--pods", podsFile)
					file += "-pods"
				}
				ext := ".txt"
				if format == "json" {
					ext = ".json"
				}
				t.Run(file+ext, func(t *testing.T) {
					out, errOut, code := run(args...)
					if code != 0 {
						t.Fatalf("exit %d: %s", code, errOut)
					}
					if format == "json" && !json.Valid([]byte(out)) {
						t.Fatalf("not JSON:\n%s", out)
					}
					golden(t, file+ext, []byte(out))
				})
			}
		}
	}
}

// The seed 003 view that the "done when" names: the busy
// misplaced container under its pod, marked, with the pod cgroup's own
// usage near zero beside it.
func TestInspectSeed003Text(t *testing.T) {
	out, errOut, code := run("inspect", "--snapshot", "example:seed-003-k3s-spin", "--pods", "../examples/snapshots/seed-003-k3s-spin.pods.json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(out, "\n")
	pod := -1
	for i, l := range lines {
		if strings.Contains(l, "kubepods-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice ") && strings.Contains(l, "pod/guaranteed") {
			pod = i
		}
	}
	if pod < 0 || pod+1 >= len(lines) {
		t.Fatalf("no pod row for 99afd520:\n%s", out)
	}
	podRow, ctrRow := strings.Fields(lines[pod]), lines[pod+1]
	if !strings.Contains(lines[pod], "default/spin-test-runwasi-") {
		t.Errorf("pod row does not name the pod: %q", lines[pod])
	}
	// Columns from the right: MEM WS (MiB), CPU USED, ...
	if used := podRow[len(podRow)-2]; used != "0.000" {
		t.Errorf("pod cgroup CPU used %q, want 0.000: %q", used, lines[pod])
	}
	if !strings.Contains(ctrRow, inspect.MisplacedMarker+" c339025b3f0d…") || !strings.Contains(ctrRow, "spin-test-runwasi") {
		t.Errorf("the row under the pod is not the marked misplaced container: %q", ctrRow)
	}
	if f := strings.Fields(ctrRow); f[len(f)-2] != "0.950" {
		t.Errorf("misplaced container CPU used %q, want 0.950: %q", f[len(f)-2], ctrRow)
	}
}

func TestInspectJSONContract(t *testing.T) {
	var r struct {
		Node struct {
			CPUs          int    `json:"cpus"`
			CgroupVersion string `json:"cgroupVersion"`
			Driver        string `json:"driver"`
		} `json:"node"`
		Pods []struct {
			UID, QoS, Name, Namespace string
			Cgroup                    *string `json:"cgroup"`
			CPU                       *struct {
				Weight          *uint64  `json:"weight"`
				GuaranteedCores float64  `json:"guaranteedCores"`
				UsageCores      *float64 `json:"usageCores"`
			} `json:"cpu"`
			Containers []struct {
				ID, Runtime, Cgroup string
				Misplaced           bool
				CPU                 struct {
					UsageCores *float64 `json:"usageCores"`
				} `json:"cpu"`
			} `json:"containers"`
		} `json:"pods"`
	}
	decode := func(name string) {
		t.Helper()
		out, errOut, code := run("inspect", "--snapshot", "example:"+name, "-o", "json", "--pods", "../examples/snapshots/"+name+".pods.json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		r.Pods = nil
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
	}

	decode("seed-003-k3s-spin")
	if r.Node.CPUs != 8 || r.Node.CgroupVersion != "v2" || r.Node.Driver != "systemd" {
		t.Errorf("node %+v", r.Node)
	}
	found := false
	for _, p := range r.Pods {
		if p.UID != "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c" {
			continue
		}
		found = true
		if p.CPU == nil || p.CPU.UsageCores == nil || *p.CPU.UsageCores != 0 || p.QoS != "guaranteed" || p.Namespace != "default" {
			t.Errorf("pod %+v", p)
		}
		if len(p.Containers) != 1 || !p.Containers[0].Misplaced || p.Containers[0].CPU.UsageCores == nil ||
			math.Abs(*p.Containers[0].CPU.UsageCores-0.95) > 1e-9 || p.Containers[0].Runtime != "containerd" {
			t.Errorf("containers %+v", p.Containers)
		}
	}
	if !found {
		t.Error("pod 99afd520 missing")
	}

	// Seed 000: the BestEffort VM pods are guaranteed far below 0.01 cores.
	decode("seed-000-eks-neonvm")
	be := 0
	for _, p := range r.Pods {
		if p.QoS == "besteffort" && p.CPU != nil {
			be++
			if p.CPU.GuaranteedCores >= 0.01 {
				t.Errorf("BestEffort pod %s/%s guaranteed %v cores", p.Namespace, p.Name, p.CPU.GuaranteedCores)
			}
		}
	}
	if be == 0 {
		t.Error("seed 000 has no BestEffort pod")
	}

	// The cgroupfs examples: v1 hybrid with containerd, v2 with CRI-O.
	for _, tc := range []struct{ name, version, runtime string }{
		{"cgroupfs-v1-containerd", "v1", "containerd"},
		{"cgroupfs-v2-crio", "v2", "crio"},
	} {
		decode(tc.name)
		if r.Node.CgroupVersion != tc.version || r.Node.Driver != "cgroupfs" {
			t.Errorf("%s: node %+v", tc.name, r.Node)
		}
		for _, p := range r.Pods {
			if p.Name == "" || p.Cgroup == nil || !strings.HasPrefix(*p.Cgroup, "/kubepods/") {
				t.Errorf("%s: pod %+v", tc.name, p)
			}
			for _, c := range p.Containers {
				if c.Misplaced || c.Runtime != tc.runtime || c.CPU.UsageCores == nil {
					t.Errorf("%s: pod %s container %+v", tc.name, p.Name, c)
				}
			}
		}
	}
}
