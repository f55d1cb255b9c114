package hold_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cgwarden/cgwarden/internal/hold"
)

// TestAdoptionMetricsStartAtZero: every result of the adopter's runs is
// served from the first scrape, so that an alert on failed runs
// (CgwardenAdoptionFailing) has a series to compare before the first
// failure; a nil AdoptionMetrics counts nothing.
func TestAdoptionMetricsStartAtZero(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(hold.NewAdoptionMetrics().Collectors()...)
	if got, err := testutil.GatherAndCount(reg, "cgwarden_adoption_runs_total"); err != nil || got != 3 {
		t.Errorf("%d cgwarden_adoption_runs_total series (%v), want one per result (3)", got, err)
	}
	var none *hold.AdoptionMetrics
	none.Count(hold.AdoptFailed, 1)
}
