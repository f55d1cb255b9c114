package inventory

import (
	"bytes"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

func loadExample(t *testing.T, name string) *snapshot.Snapshot {
	t.Helper()
	raw, ok := examples.Open(name)
	if !ok {
		t.Fatalf("no embedded %s", name)
	}
	s, err := snapshot.Load(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSamplingOnePicture: the loop gives the same picture however the
// samples come (all at once as a snapshot replay does, or one at a time as
// serve does), with /proc/meminfo read on every path (before the loop was
// one, only serve read it) and the fair share only when demand is asked.
func TestSamplingOnePicture(t *testing.T) {
	s := loadExample(t, "seed-000-eks-neonvm") // records meminfo and the threads' schedstat
	all, err := (&Sampling{Demand: true}).TakeAll(s.Samples)
	if err != nil {
		t.Fatal(err)
	}
	one := &Sampling{Demand: true}
	var n *Node
	for _, smp := range s.Samples {
		sc, err := Open(smp.FS)
		if err != nil {
			t.Fatal(err)
		}
		if n, err = one.Take(sc, smp.Time); err != nil {
			t.Fatal(err)
		}
	}
	if all.Root.FairCores == nil || all.KubeRoot.UsageCores == nil {
		t.Fatal("no fair share or rates after two samples with demand")
	}
	all.Root.Walk(func(c *Cgroup) {
		d := n.Find(c.Path)
		if d == nil || (c.FairCores == nil) != (d.FairCores == nil) || c.FairCores != nil && *c.FairCores != *d.FairCores ||
			(c.UsageCores == nil) != (d.UsageCores == nil) || c.UsageCores != nil && *c.UsageCores != *d.UsageCores {
			t.Errorf("%s differs between the paths", c.Path)
		}
	})
	// Seed 003 records /proc/meminfo: a CLI replay reads it as serve does.
	plain, err := (&Sampling{}).TakeAll(loadExample(t, "seed-003-k3s-spin").Samples)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Root.FairCores != nil || plain.Meminfo == nil || plain.Meminfo.TotalBytes != 16303328*1024 || plain.KubeRoot.UsageCores == nil {
		t.Errorf("without demand: fair %v, meminfo %+v, rate %v", plain.Root.FairCores, plain.Meminfo, plain.KubeRoot.UsageCores)
	}
}

// TestSamplingLive: a live interval is cut in looks parts with demand (the
// threads' states looked at after each) and one without; a zero interval
// takes one sample and reads no threads.
func TestSamplingLive(t *testing.T) {
	s := loadExample(t, "seed-000-eks-neonvm")
	for _, c := range []struct {
		demand   bool
		interval time.Duration
		waits    int
		fair     bool
	}{
		{true, time.Millisecond, 4, true},
		{false, time.Millisecond, 1, false},
		{true, 0, 0, false},
	} {
		sc, err := Open(s.Samples[0].FS)
		if err != nil {
			t.Fatal(err)
		}
		smp := &Sampling{Demand: c.demand}
		waits := 0
		n, err := smp.Live(sc, c.interval, 4, func(i, parts int) {
			if i != waits || parts != c.waits {
				t.Errorf("wait(%d, %d), want (%d, %d)", i, parts, waits, c.waits)
			}
			waits++
		})
		if err != nil {
			t.Fatal(err)
		}
		if waits != c.waits || (n.Root.FairCores != nil) != c.fair || smp.rs.Samples != 0 {
			t.Errorf("%+v: %d waits, fair %v, looks left %d", c, waits, n.Root.FairCores, smp.rs.Samples)
		}
	}
}
