package hold

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// TestAdoptionCountsFailedRuns: while another cgwarden holds the journal
// (a `cgwarden fix` run by hand), every adoption run fails, and /metrics
// counts them as failed, none adopted or clean: what CgwardenAdoptionFailing
// alerts on.
func TestAdoptionCountsFailedRuns(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	m := NewAdoptionMetrics()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		RunAdoption(ctx, &fix.Engine{JournalDir: dir, Steady: true}, func(context.Context) (*metadata.Set, error) { return nil, nil },
			time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)), m, func(*fix.Result) { t.Error("a run applied something while the journal was locked") })
	}()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(m.runs.WithLabelValues(AdoptFailed)) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("fewer than 3 failed runs counted in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if a, c := testutil.ToFloat64(m.runs.WithLabelValues(AdoptAdopted)), testutil.ToFloat64(m.runs.WithLabelValues(AdoptClean)); a != 0 || c != 0 {
		t.Errorf("adopted %v, clean %v runs counted while the journal was locked; want 0 and 0", a, c)
	}
	if got := testutil.CollectAndCount(m, "cgwarden_adoption_runs_total"); got != 3 {
		t.Errorf("%d cgwarden_adoption_runs_total series, want one per result (3)", got)
	}
}
