package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestInspectDemand: inspect --demand on seed 000 shows the demand and
// fair-share columns, and the JSON gives each VM pod its demand (its vCPU
// threads runnable the whole interval, at most the VM's quota) and a fair
// share far below it.
func TestInspectDemand(t *testing.T) {
	out, errs, code := run("inspect", "--demand", "--snapshot", "example:seed-000-eks-neonvm", "--pods", seed000+".pods.json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "DEMAND") || !strings.Contains(out, "FAIR") {
		t.Errorf("no DEMAND and FAIR columns:\n%s", out[:min(len(out), 400)])
	}
	out, errs, code = run("inspect", "--demand", "-o", "json", "--snapshot", "example:seed-000-eks-neonvm", "--pods", seed000+".pods.json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc struct {
		Pods []struct {
			Name string `json:"name"`
			QoS  string `json:"qos"`
			CPU  struct {
				DemandCores *float64 `json:"demandCores"`
				FairCores   *float64 `json:"fairCores"`
			} `json:"cpu"`
		} `json:"pods"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"compute-silent-frost": 0.25, "compute-bold-river": 1, "compute-green-meadow": 4}
	seen := 0
	for _, p := range doc.Pods {
		for prefix, size := range want {
			if !strings.HasPrefix(p.Name, prefix) {
				continue
			}
			seen++
			d, f := p.CPU.DemandCores, p.CPU.FairCores
			if d == nil || f == nil {
				t.Fatalf("%s: no demand or fair share", p.Name)
			}
			if *d < size*0.99 || *d > size*1.01 {
				t.Errorf("%s: demand %.3f cores, want its VM's %v", p.Name, *d, size)
			}
			if *f >= 0.01 {
				t.Errorf("%s: fair share %.4f cores under the seed's load, want far below 0.01", p.Name, *f)
			}
		}
	}
	if seen != 3 {
		t.Errorf("found %d of the 3 VM pods", seen)
	}
}

// TestSeed000Guaranteed is issue 2's check on the seed-000 example:
// inspect -o json gives the BestEffort VM pods a guaranteed CPU far below
// 0.01 cores, on a node of a plausible EKS size, with the seed's weights.
func TestSeed000Guaranteed(t *testing.T) {
	out, errs, code := run("inspect", "-o", "json", "--snapshot", "example:seed-000-eks-neonvm")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc struct {
		Node struct {
			CPUs          int    `json:"cpus"`
			CgroupVersion string `json:"cgroupVersion"`
			Driver        string `json:"driver"`
		} `json:"node"`
		Pods []struct {
			UID string `json:"uid"`
			QoS string `json:"qos"`
			CPU *struct {
				Weight          *uint64 `json:"weight"`
				GuaranteedCores float64 `json:"guaranteedCores"`
			} `json:"cpu"`
		} `json:"pods"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Node.CPUs < 16 || doc.Node.CPUs > 192 || doc.Node.CgroupVersion != "v1" || doc.Node.Driver != "systemd" {
		t.Errorf("node %+v, want an EKS-sized v1 systemd node", doc.Node)
	}
	be := 0
	for _, p := range doc.Pods {
		switch {
		case p.QoS == "besteffort":
			be++
			if p.CPU == nil || p.CPU.Weight == nil || *p.CPU.Weight != 2 || p.CPU.GuaranteedCores >= 0.01 {
				t.Errorf("BestEffort pod %s: cpu %+v, want weight 2 and far below 0.01 cores", p.UID, p.CPU)
			}
		case p.UID == "cb6dc9c2-eda7-4e8a-8e4a-948169e57cdc":
			if p.CPU == nil || p.CPU.Weight == nil || *p.CPU.Weight != 2048 {
				t.Errorf("the overprovisioning pod: %+v, want the seed's 2048", p.CPU)
			}
		case p.UID == "050b4a85-f401-4ddb-a585-3d2120ee0132":
			if p.CPU == nil || p.CPU.Weight == nil || *p.CPU.Weight != 276 {
				t.Errorf("compute-orange-recipe: %+v, want the seed's 276", p.CPU)
			}
		}
	}
	if be < 3 {
		t.Errorf("%d BestEffort pods, want the VM runners", be)
	}
}
