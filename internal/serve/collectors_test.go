package serve

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestEveryDeclaredSeriesIsEmitted: fed the seed-003 snapshot (two
// samples: rates, thread times, meminfo) under the configurations serve
// runs with (audit findings on; with and without --demand), each of
// cgwarden's own collectors emits every series it declares. A declared series no path fills (as the
// fair-share series were before one sample loop fed serve) fails here.
func TestEveryDeclaredSeriesIsEmitted(t *testing.T) {
	for _, demand := range []bool{false, true} {
		t.Run(fmt.Sprintf("demand=%v", demand), func(t *testing.T) {
			everyDeclaredSeriesIsEmitted(t, Config{NodeName: "k3s-node", Findings: AuditFindings, Demand: demand})
		})
	}
}

func everyDeclaredSeriesIsEmitted(t *testing.T, cfg Config) {
	s := feedExampleTo(t, cfg, "seed-003-k3s-spin", nil)
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

// descName is the fqName of a Desc (its String form is the only way to
// read it back).
func descName(d *prometheus.Desc) string {
	s := d.String()
	_, rest, _ := strings.Cut(s, `fqName: "`)
	name, _, _ := strings.Cut(rest, `"`)
	return name
}
