package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// open is the journal of dir, locked: New and Lock (Close releases it).
func open(dir string) (*Journal, error) {
	j := New(dir)
	if err := j.Lock(); err != nil {
		return nil, err
	}
	return j, nil
}

// read is the journal of dir as a reader without its lock sees it (a dry
// run): New and Snapshot.
func read(dir string) ([]Entry, error) {
	j := New(dir)
	defer j.Close()
	return j.Snapshot()
}

func mustOpen(t *testing.T, dir string) *Journal {
	t.Helper()
	j, err := open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestAppendReadsBack(t *testing.T) {
	dir := t.TempDir()
	j := mustOpen(t, dir)
	op := plan.Op{Kind: plan.Write, Rule: rules.MisplacedContainer, Path: "/sys/fs/cgroup/kubepods/x/cpu.weight", Value: "100"}
	prev := "50"
	for _, e := range []Entry{
		{Type: Begin, Apply: "r1"},
		{Type: Intent, Apply: "r1", Op: &op, Prev: &plan.Prev{Value: &prev}},
		{Type: Done, Apply: "r1", Ref: 2},
	} {
		if _, err := j.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	got, err := read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1].Seq != 2 || got[1].Op.Path != op.Path || *got[1].Prev.Value != "50" || got[2].Ref != 2 {
		t.Fatalf("read back %+v", got)
	}
	st, _ := os.Stat(filepath.Join(dir, FileName))
	if st.Mode().Perm() != 0o600 {
		t.Errorf("journal mode %v, want 0600", st.Mode().Perm())
	}
}

// A line without its newline was never completely written (and never
// fsync'd whole): Read ignores it, Open cuts it off, and appends go on
// after the last whole entry.
func TestTornTailIsCut(t *testing.T) {
	dir := t.TempDir()
	whole := `{"seq":1,"time":"2026-01-01T00:00:00Z","type":"begin","apply":"r1"}` + "\n"
	torn := `{"seq":2,"time":"2026-01-01T00:00:01Z","type":"inte`
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(whole+torn), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := read(dir); err != nil || len(got) != 1 {
		t.Fatalf("Read = %v, %v; want the one whole entry", got, err)
	}
	j := mustOpen(t, dir)
	if _, err := j.Append(Entry{Type: End, Apply: "r1"}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	raw, _ := os.ReadFile(filepath.Join(dir, FileName))
	if strings.Contains(string(raw), "inte") || bytes.Count(raw, []byte("\n")) != 2 {
		t.Fatalf("journal after reopening:\n%s", raw)
	}
	got, err := read(dir)
	if err != nil || len(got) != 2 || got[1].Seq != 2 || got[1].Type != End {
		t.Fatalf("Read = %+v, %v", got, err)
	}
}

// A bad line that is not the torn tail is corruption: nothing is guessed.
func TestCorruptLineIsAnError(t *testing.T) {
	for name, content := range map[string]string{
		"garbage":      "{\"seq\":1,\"type\":\"begin\",\"apply\":\"r\"}\nnot json\n{\"seq\":3,\"type\":\"end\",\"apply\":\"r\"}\n",
		"unknown":      "{\"seq\":1,\"type\":\"begin\",\"apply\":\"r\",\"surprise\":1}\n",
		"no-type":      "{\"seq\":1,\"apply\":\"r\"}\n",
		"no-apply-id":  "{\"seq\":1,\"type\":\"begin\"}\n",
		"wrong-shapes": "{\"seq\":\"one\",\"type\":\"begin\",\"apply\":\"r\"}\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			var ce *CorruptError
			if _, err := read(dir); !errors.As(err, &ce) {
				t.Fatalf("Read error = %v, want a CorruptError", err)
			}
			if _, err := open(dir); !errors.As(err, &ce) {
				t.Fatalf("Open error = %v, want a CorruptError", err)
			}
		})
	}
}

func TestLockExcludesASecondRun(t *testing.T) {
	dir := t.TempDir()
	j := mustOpen(t, dir)
	if _, err := open(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open error = %v, want ErrLocked", err)
	}
	j.Close()
	j2 := mustOpen(t, dir)
	j2.Close()
}

func TestMissingJournalIsEmpty(t *testing.T) {
	got, err := read(filepath.Join(t.TempDir(), "nowhere"))
	if err != nil || got != nil {
		t.Fatalf("Read = %v, %v", got, err)
	}
}

func TestApplies(t *testing.T) {
	mk := func(kind plan.Kind, p string) *plan.Op { return &plan.Op{Kind: kind, Path: p} }
	entries := []Entry{
		{Seq: 1, Type: Begin, Apply: "r1"},
		{Seq: 2, Type: Intent, Apply: "r1", Op: mk(plan.Mkdir, "/c/a"), Prev: &plan.Prev{}},
		{Seq: 3, Type: Done, Apply: "r1", Ref: 2},
		{Seq: 4, Type: Intent, Apply: "r1", Op: mk(plan.Write, "/c/a/cpu.weight")},
		{Seq: 5, Type: Failed, Apply: "r1", Ref: 4, Error: "invalid argument"},
		{Seq: 6, Type: Intent, Apply: "r1", Op: &plan.Op{Kind: plan.Move, Pairs: []plan.Pair{{Source: "/s", Target: "/c/a"}}}},
		{Seq: 7, Type: Progress, Apply: "r1", Ref: 6, Pids: Bare([]int{10, 11})},
		{Seq: 8, Type: Intent, Apply: "r1", Op: mk(plan.Mkdir, "/c/b"), Prev: &plan.Prev{Existed: true}},
		{Seq: 9, Type: Intent, Apply: "r1", Op: mk(plan.Mkdir, "/c/c"), Prev: &plan.Prev{}},
	}
	runs := Applies(entries)
	if len(runs) != 1 {
		t.Fatalf("%d runs", len(runs))
	}
	r := runs[0]
	st := func(i int) Status { return r.Steps[i].Status }
	if st(0) != StatusDone || st(1) != StatusFailed || st(2) != StatusInDoubt || len(r.Steps[2].Pids) != 2 {
		t.Fatalf("statuses %v %v %v, move pids %v", st(0), st(1), st(2), r.Steps[2].Pids)
	}
	// Newest first; the failed write changed nothing and is left out; the
	// in-doubt move and mkdirs are in.
	var order []int
	for _, s := range r.Pending() {
		order = append(order, s.Seq)
	}
	if want := []int{9, 8, 6, 2}; !slices.Equal(order, want) {
		t.Fatalf("pending %v, want %v", order, want)
	}
	if Unfinished(runs) != r {
		t.Fatal("a run without an end is unfinished")
	}
	if got := Owned(runs); !slices.Equal(got, []string{"/c/a", "/c/c"}) {
		t.Fatalf("owned %v", got)
	}
	entries = append(entries, Entry{Seq: 10, Type: RevertBegin, Apply: "r1"}, Entry{Seq: 11, Type: Undone, Apply: "r1", Ref: 9})
	runs = Applies(entries)
	if Unfinished(runs) != nil {
		t.Fatal("a run being reverted is not continued by an apply")
	}
	if got := Owned(runs); !slices.Equal(got, []string{"/c/a"}) {
		t.Fatalf("owned after undoing /c/c: %v", got)
	}
}

// FuzzParse: no input makes the journal reader panic, and whatever it
// accepts is a prefix of whole lines.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"seq":1,"time":"2026-01-01T00:00:00Z","type":"begin","apply":"r1"}` + "\n"))
	f.Add([]byte(`{"seq":2,"type":"intent","apply":"r","op":{"kind":"write","rule":"misplaced-container","description":"d","path":"/x/cpu.weight","value":"1"},"prev":{"value":"2"}}` + "\n{\"seq\":3"))
	f.Add([]byte("\n\n"))
	f.Add([]byte(`{"seq":1,"type":"progress","apply":"r","ref":1,"pids":[1,2,3],"exited":[4]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, good, err := parse(bytes.NewReader(b), "fuzz", 0)
		if err != nil {
			return
		}
		if good > int64(len(b)) || (good > 0 && b[good-1] != '\n') {
			t.Fatalf("whole prefix %d of %d bytes does not end a line", good, len(b))
		}
		for _, e := range entries {
			if e.Type == "" || e.Apply == "" {
				t.Fatalf("accepted an entry without type or apply: %+v", e)
			}
		}
		Applies(entries)
	})
}

// TestSettledRunsDoNotPinRevert: a run whose remaining steps a revert
// already tried and could not undo is settled, so a plain revert moves on;
// a step never tried keeps its run unsettled.
func TestSettledRunsDoNotPinRevert(t *testing.T) {
	mk := func(p string) *plan.Op { return &plan.Op{Kind: plan.Mkdir, Path: p} }
	entries := []Entry{
		{Seq: 1, Type: Begin, Apply: "r1"},
		{Seq: 2, Type: Intent, Apply: "r1", Op: mk("/c/a"), Prev: &plan.Prev{}},
		{Seq: 3, Type: Done, Apply: "r1", Ref: 2},
		{Seq: 4, Type: End, Apply: "r1"},
		{Seq: 5, Type: Begin, Apply: "r2"},
		{Seq: 6, Type: Intent, Apply: "r2", Op: mk("/c/b"), Prev: &plan.Prev{}},
		{Seq: 7, Type: Done, Apply: "r2", Ref: 6},
		{Seq: 8, Type: Intent, Apply: "r2", Op: mk("/c/c"), Prev: &plan.Prev{}},
		{Seq: 9, Type: Done, Apply: "r2", Ref: 8},
		{Seq: 10, Type: End, Apply: "r2"},
		{Seq: 11, Type: RevertBegin, Apply: "r2"},
		{Seq: 12, Type: Undone, Apply: "r2", Ref: 8},
		{Seq: 13, Type: UndoFailed, Apply: "r2", Ref: 6, Error: "cgroup busy"},
		{Seq: 14, Type: RevertEnd, Apply: "r2"},
	}
	runs := Applies(entries)
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	r1, r2 := runs[0], runs[1]
	if p := r2.Pending(); len(p) != 1 || !p[0].UndoFailed {
		t.Fatalf("r2 pending %+v, want the one step whose undo failed", p)
	}
	if !r2.Settled() {
		t.Error("r2: every pending step was tried, want settled")
	}
	if r1.Settled() {
		t.Error("r1: a step was never reverted, want unsettled")
	}
}

// TestProcsOldAndNew: a journal written before start times were recorded
// names moved processes by bare PIDs, and still reads (their start times
// unknown); one written since records {"pid","start"} and reads back the
// same; a process object with a field the journal does not know is
// corrupt, as any unknown field is.
func TestProcsOldAndNew(t *testing.T) {
	dir := t.TempDir()
	old := `{"seq":1,"time":"2026-01-01T00:00:00Z","type":"progress","apply":"r1","ref":1,"pids":[10,11]}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	entries, err := read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := entries[0].Pids; len(got) != 2 || got[0].PID != 10 || got[1].PID != 11 || got[0].Start != nil || got[1].Start != nil {
		t.Fatalf("old pids read as %+v", got)
	}
	start := uint64(4937096)
	e := Entry{Seq: 2, Type: Intent, Apply: "r1", Boot: "6e344e4e-bb4d-4378-8c4a-73310ce35a7c", Pids: []Proc{{PID: 12, Start: &start}, {PID: 13}}}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"pids":[{"pid":12,"start":4937096},13]`; !strings.Contains(string(b), want) {
		t.Errorf("written as %s, want %s in it", b, want)
	}
	got, _, err := parse(strings.NewReader(string(b)+"\n"), "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	if p := got[0].Pids; len(p) != 2 || p[0].PID != 12 || p[0].Start == nil || *p[0].Start != start || p[1] != (Proc{PID: 13}) || got[0].Boot != e.Boot {
		t.Errorf("read back as %+v boot %q", p, got[0].Boot)
	}
	for _, bad := range []string{`[{"pid":12,"start":1,"comm":"x"}]`, `[{"start":1}]`, `["12"]`, `[{"pid":12,"start":-1}]`} {
		line := `{"seq":1,"type":"progress","apply":"r1","pids":` + bad + "}\n"
		var ce *CorruptError
		if _, _, err := parse(strings.NewReader(line), "test", 0); !errors.As(err, &ce) {
			t.Errorf("pids %s: %v, want a CorruptError", bad, err)
		}
	}
}

// TestHasUnfinished: a run cut off (begun, never ended) is unfinished; an
// ended one is not; an empty or missing journal has none. It is read
// without the file lock, beside another process's lock.
func TestHasUnfinished(t *testing.T) {
	dir := t.TempDir()
	reader := New(dir)
	check := func(want bool) {
		t.Helper()
		got, err := reader.HasUnfinished()
		if err != nil || got != want {
			t.Fatalf("HasUnfinished = %v, %v; want %v", got, err, want)
		}
	}
	check(false) // missing
	w := mustOpen(t, dir)
	defer w.Close()
	op := plan.Op{Kind: plan.Write, Rule: rules.MisplacedContainer, Path: "/sys/fs/cgroup/kubepods/x/cpu.weight", Value: "100"}
	prev := "50"
	for _, e := range []Entry{{Type: Begin, Apply: "r1"}, {Type: Intent, Apply: "r1", Op: &op, Prev: &plan.Prev{Value: &prev}}} {
		if _, err := w.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	check(true) // cut off after its intent, the writer's lock held
	if _, err := w.Append(Entry{Type: Done, Apply: "r1", Ref: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(Entry{Type: End, Apply: "r1"}); err != nil {
		t.Fatal(err)
	}
	check(false)
}
