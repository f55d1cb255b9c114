package serve

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// TestEveryDeclaredSeriesIsEmitted: fed the seed-003 snapshot (two
// samples: rates, thread times, meminfo) under the configurations serve
// runs with (audit findings on; with and without --demand), each of
// cgwarden's own collectors emits every series it declares. A declared series no path fills (as the
// fair-share series were before one sample loop fed serve) fails here.
func TestEveryDeclaredSeriesIsEmitted(t *testing.T) {
	for _, demand := range []bool{false, true} {
		t.Run(fmt.Sprintf("demand=%v", demand), func(t *testing.T) {
			everyDeclaredSeriesIsEmitted(t, Config{NodeName: "k3s-node", Findings: true, Demand: demand})
		})
	}
}

func everyDeclaredSeriesIsEmitted(t *testing.T, cfg Config) {
	// The seed's pod declares a size (the annotation a pods file can
	// carry), or cgwarden_pod_cpu_declared_cores has nothing to fill; its
	// other pod declares one that is not a size, for
	// cgwarden_pod_cpu_size_not_believed.
	meta := metadata.NewSet([]metadata.Pod{{UID: seedPod, Name: "spin-test-66d9dd45f5-csf5j", Namespace: "default", QoS: "besteffort",
		Annotation: map[string]string{vmsize.AnnotationCPU: "2"}},
		{UID: "79c5176e2321b3741f55aee0036af2a9", Name: "spin-test-kagold", Namespace: "default", QoS: "besteffort",
			Annotation: map[string]string{vmsize.AnnotationCPU: "lots"}}})
	s := feedExampleTo(t, cfg, "seed-003-k3s-spin", meta)
	for name, c := range map[string]prometheus.Collector{
		"pod": podCollector{s}, "container": containerCollector{s}, "node": nodeCollector{s},
	} {
		declared := map[string]bool{}
		descs := make(chan *prometheus.Desc, 64)
		c.Describe(descs)
		close(descs)
		for d := range descs {
			declared[descName(d)] = false
		}
		ms := make(chan prometheus.Metric, 1024)
		c.Collect(ms)
		close(ms)
		for m := range ms {
			declared[descName(m.Desc())] = true
		}
		for series, emitted := range declared {
			if !emitted {
				t.Errorf("%s collector: %s declared, never emitted", name, series)
			}
		}
	}
}

// TestDeclaredCoresOfSeed000VMs: on the seed-000 node (EKS, NeonVM), named
// by its pods file, each NeonVM runner pod serves the size of its VM's
// -vmspec as cgwarden_pod_cpu_declared_cores beside the sliver it is
// guaranteed (what the CgwardenVMStarved alert compares), and no other pod
// serves a declared size.
func TestDeclaredCoresOfSeed000VMs(t *testing.T) {
	pods, err := metadata.ReadPodsFile("../examples/snapshots/seed-000-eks-neonvm.pods.json")
	if err != nil {
		t.Fatal(err)
	}
	s := feedExampleTo(t, Config{NodeName: "ip-10-6-42-17"}, "seed-000-eks-neonvm", metadata.NewSet(pods))
	declared, guaranteed := map[string]float64{}, map[string]float64{}
	ms := make(chan prometheus.Metric, 4096)
	podCollector{s}.Collect(ms)
	close(ms)
	for m := range ms {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		uid := ""
		for _, l := range pb.GetLabel() {
			if l.GetName() == "uid" {
				uid = l.GetValue()
			}
		}
		switch descName(m.Desc()) {
		case "cgwarden_pod_cpu_declared_cores":
			declared[uid] = pb.GetGauge().GetValue()
		case "cgwarden_pod_cpu_guaranteed_cores":
			guaranteed[uid] = pb.GetGauge().GetValue()
		}
	}
	var runners []string
	for _, p := range pods {
		if p.VMSize != nil {
			runners = append(runners, p.UID)
		}
	}
	if len(runners) != 3 {
		t.Fatalf("%d runner pods with a -vmspec in the pods file, want the seed's 3", len(runners))
	}
	if len(declared) != len(runners) {
		t.Errorf("declared sizes for %d pods, want the %d runners: %v", len(declared), len(runners), declared)
	}
	for _, p := range pods {
		if p.VMSize == nil {
			continue
		}
		want := float64(p.VMSize.MilliCPU) / 1000
		if declared[p.UID] != want {
			t.Errorf("runner %s: declared %v cores, want its -vmspec's %v", p.Name, declared[p.UID], want)
		}
		if g, ok := guaranteed[p.UID]; !ok || g >= want/2 {
			t.Errorf("runner %s: guaranteed %v cores (served: %v) of its %v: the seed's VMs are starved", p.Name, g, ok, want)
		}
	}
}

// descName is the fqName of a Desc (its String form is the only way to
// read it back).
func descName(d *prometheus.Desc) string {
	s := d.String()
	_, rest, _ := strings.Cut(s, `fqName: "`)
	name, _, _ := strings.Cut(rest, `"`)
	return name
}
