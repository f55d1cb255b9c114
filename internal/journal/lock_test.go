package journal

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestSharedJournalWaits: the writers of one process share a Journal and
// wait for each other (none fails with ErrLocked, none loses an entry),
// while another process's Journal — its own flock — is refused at once.
func TestSharedJournalWaits(t *testing.T) {
	dir := t.TempDir()
	j := New(dir)
	defer j.Close()
	const writers, runs = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*runs)
	for w := range writers {
		wg.Go(func() {
			for r := range runs {
				if err := j.Lock(); err != nil {
					errs <- err
					return
				}
				id := fmt.Sprintf("w%d-%d", w, r)
				for _, typ := range []Type{Begin, End} {
					if _, err := j.Append(Entry{Type: typ, Apply: id}); err != nil {
						errs <- err
					}
				}
				if err := j.Unlock(); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != writers*runs*2 {
		t.Fatalf("%d entries, want %d", len(got), writers*runs*2)
	}
	// A run's two entries are next to each other: each writer held the
	// journal for its whole run.
	for i := 0; i < len(got); i += 2 {
		if got[i].Apply != got[i+1].Apply || got[i].Seq != i+1 {
			t.Fatalf("entries %d and %d: %+v %+v", i, i+1, got[i], got[i+1])
		}
	}

	if err := j.Lock(); err != nil {
		t.Fatal(err)
	}
	if _, err := open(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("another process's Open beside a held lock: %v, want ErrLocked", err)
	}
	if err := j.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// TestLockReadsTheTail: a Journal kept between locks reads only what
// another process appended since, follows a compaction that replaced the
// file.
func TestLockReadsTheTail(t *testing.T) {
	dir := t.TempDir()
	writeJournal(t, dir, history())
	mine := New(dir)
	defer mine.Close()
	if err := mine.Lock(); err != nil {
		t.Fatal(err)
	}
	whole := mine.read
	if whole != mine.Size() || len(mine.Entries()) != len(history()) {
		t.Fatalf("first Lock read %d of %d bytes, %d entries", whole, mine.Size(), len(mine.Entries()))
	}
	mine.Unlock()

	other := mustOpen(t, dir) // another process
	e, err := other.Append(Entry{Type: Begin, Apply: "r5"})
	if err != nil {
		t.Fatal(err)
	}
	tail := other.Size() - whole
	other.Close()
	if err := mine.Lock(); err != nil {
		t.Fatal(err)
	}
	if got := mine.read - whole; got != tail {
		t.Errorf("Lock after another process's append read %d bytes, want the %d of the tail", got, tail)
	}
	if es := mine.Entries(); es[len(es)-1].Seq != e.Seq || es[len(es)-1].Apply != "r5" {
		t.Errorf("last entry %+v, want the other process's %+v", es[len(es)-1], e)
	}
	before := mine.read
	mine.Unlock()
	if err := mine.Lock(); err != nil {
		t.Fatal(err)
	}
	if mine.read != before {
		t.Errorf("Lock of an unchanged journal read %d bytes", mine.read-before)
	}
	mine.Unlock()

	other = mustOpen(t, dir)
	if err := other.Compact(nil); err != nil {
		t.Fatal(err)
	}
	want := other.Entries()
	other.Close()
	if err := mine.Lock(); err != nil {
		t.Fatal(err)
	}
	if got := mine.Entries(); len(got) != len(want) || got[len(got)-1].Seq != want[len(want)-1].Seq {
		t.Errorf("after another process compacted: %v, want %v", seqs(got), seqs(want))
	}
	if _, err := mine.Append(Entry{Type: End, Apply: "r5"}); err != nil {
		t.Fatal(err)
	}
	mine.Unlock()
	if got, err := read(dir); err != nil || len(got) != len(want)+1 {
		t.Fatalf("Read after compaction and append: %d entries, %v", len(got), err)
	}
}

// Snapshot reads without the file lock: beside another process's lock it
// still answers, and it creates nothing where there is no journal.
func TestSnapshotBesideALock(t *testing.T) {
	dir := t.TempDir()
	if got, err := New(dir + "/none").Snapshot(); err != nil || got != nil {
		t.Fatalf("Snapshot of no journal: %v, %v", got, err)
	}
	other := mustOpen(t, dir)
	defer other.Close()
	if _, err := other.Append(Entry{Type: Begin, Apply: "r1"}); err != nil {
		t.Fatal(err)
	}
	got, err := New(dir).Snapshot()
	if err != nil || len(got) != 1 {
		t.Fatalf("Snapshot beside a lock: %v, %v", got, err)
	}
}
