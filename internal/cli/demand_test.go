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
