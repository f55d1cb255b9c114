package journal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/plan"
)

func strp(s string) *string { return &s }

// history is two adoptions of one container (the second after a restart
// reuses the cgroup cgwarden made) and a weight the kubelet reset in
// between, then a revert of a third run; the outcomes say what a compacted
// journal must still hold.
func history() []Entry {
	w := func(p string) *plan.Op { return &plan.Op{Kind: plan.Write, Path: p, Value: "512"} }
	mv := &plan.Op{Kind: plan.Move, Pairs: []plan.Pair{{Source: "/c/src", Target: "/c/pod/t"}}}
	return []Entry{
		{Seq: 1, Type: Begin, Apply: "r1"},
		{Seq: 2, Type: Intent, Apply: "r1", Op: &plan.Op{Kind: plan.Mkdir, Path: "/c/pod/t"}, Prev: &plan.Prev{}},
		{Seq: 3, Type: Done, Apply: "r1", Ref: 2},
		{Seq: 4, Type: Intent, Apply: "r1", Op: w("/c/tier/cpu.shares"), Prev: &plan.Prev{Value: strp("2")}},
		{Seq: 5, Type: Done, Apply: "r1", Ref: 4},
		{Seq: 6, Type: Intent, Apply: "r1", Op: mv, Prev: &plan.Prev{Pids: map[string][]int{"/c/src": {10, 11}}}},
		{Seq: 7, Type: Progress, Apply: "r1", Ref: 6, Pids: Bare([]int{10})},
		{Seq: 8, Type: Progress, Apply: "r1", Ref: 6, Pids: Bare([]int{11}), Exited: []int{12}},
		{Seq: 9, Type: Done, Apply: "r1", Ref: 6},
		{Seq: 10, Type: Intent, Apply: "r1", Op: w("/c/pod/t/cpu.cfs_quota_us"), Prev: &plan.Prev{Value: strp("-1")}},
		{Seq: 11, Type: Failed, Apply: "r1", Ref: 10, Error: "invalid argument"},
		{Seq: 12, Type: End, Apply: "r1"},
		// The kubelet reset the tier; the second adoption wrote it again,
		// replacing the kubelet's value ("2" again) — superseded by seq 4.
		{Seq: 13, Type: Begin, Apply: "r2"},
		{Seq: 14, Type: Intent, Apply: "r2", Op: &plan.Op{Kind: plan.Mkdir, Path: "/c/pod/t"}, Prev: &plan.Prev{Existed: true}},
		{Seq: 15, Type: Done, Apply: "r2", Ref: 14},
		{Seq: 16, Type: Intent, Apply: "r2", Op: w("/c/tier/cpu.shares"), Prev: &plan.Prev{Value: strp("2")}},
		{Seq: 17, Type: Done, Apply: "r2", Ref: 16},
		{Seq: 18, Type: End, Apply: "r2"},
		// A run reverted whole: nothing of it is needed any more.
		{Seq: 19, Type: Begin, Apply: "r3"},
		{Seq: 20, Type: Intent, Apply: "r3", Op: &plan.Op{Kind: plan.Mkdir, Path: "/c/other"}, Prev: &plan.Prev{}},
		{Seq: 21, Type: Done, Apply: "r3", Ref: 20},
		{Seq: 22, Type: End, Apply: "r3"},
		{Seq: 23, Type: RevertBegin, Apply: "r3"},
		{Seq: 24, Type: Undone, Apply: "r3", Ref: 20, Note: "undone"},
		{Seq: 25, Type: RevertEnd, Apply: "r3"},
		// A run whose undo failed once: kept, marked, for revert --all.
		{Seq: 26, Type: Begin, Apply: "r4"},
		{Seq: 27, Type: Intent, Apply: "r4", Op: &plan.Op{Kind: plan.Mkdir, Path: "/c/busy"}, Prev: &plan.Prev{}},
		{Seq: 28, Type: Done, Apply: "r4", Ref: 27},
		{Seq: 29, Type: End, Apply: "r4"},
		{Seq: 30, Type: RevertBegin, Apply: "r4"},
		{Seq: 31, Type: UndoFailed, Apply: "r4", Ref: 27, Error: "busy"},
		{Seq: 32, Type: UndoFailed, Apply: "r4", Ref: 27, Error: "still busy"},
	}
}

func seqs(es []Entry) []int {
	var out []int
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

func TestCompactKeepsWhatRevertNeeds(t *testing.T) {
	in := history()
	got := Compact(in, nil)
	// r1: begin, mkdir + done, tier write + done, move + one merged done,
	// end (the failed write goes); r2 and r3 go; r4 keeps its begin,
	// mkdir, end, revert mark and last undo failure.
	if want := []int{1, 2, 3, 4, 5, 6, 9, 12, 26, 27, 28, 29, 30, 32}; !slices.Equal(seqs(got), want) {
		t.Fatalf("kept %v, want %v", seqs(got), want)
	}
	before, after := Applies(in), Applies(got)
	if !slices.Equal(Owned(before), Owned(after)) || !maps.Equal(Written(before), Written(after)) {
		t.Errorf("owned %v → %v, written %v → %v", Owned(before), Owned(after), Written(before), Written(after))
	}
	r1 := after[0]
	mvStep := r1.Steps[2]
	if mvStep.Status != StatusDone || !slices.Equal(mvStep.Pids, Bare([]int{10, 11})) {
		t.Errorf("move after compaction: %+v, want done with pids 10 and 11", mvStep)
	}
	if tier := r1.Steps[1]; tier.Op.Path != "/c/tier/cpu.shares" || *tier.Prev.Value != "2" {
		t.Errorf("the tier's first value is not kept: %+v", tier)
	}
	r4 := after[len(after)-1]
	if r4.ID != "r4" || !r4.RevertStarted || r4.Reverted || len(r4.Pending()) != 1 || !r4.Settled() {
		t.Errorf("r4 after compaction: %+v", r4)
	}
	if again := Compact(got, nil); !slices.EqualFunc(again, got, sameEntry) {
		t.Errorf("compacting twice changed the journal: %v → %v", seqs(got), seqs(again))
	}

	// Gone: the pod cgroup was removed with everything in it.
	gone := func(s *Step) bool { return strings.HasPrefix(opPath(s.Op), "/c/pod/") }
	got = Compact(in, gone)
	if want := []int{1, 4, 5, 12, 26, 27, 28, 29, 30, 32}; !slices.Equal(seqs(got), want) {
		t.Fatalf("kept %v with the pod gone, want %v", seqs(got), want)
	}
}

func opPath(op plan.Op) string {
	if op.Kind == plan.Move && len(op.Pairs) > 0 {
		return op.Pairs[0].Target
	}
	return op.Path
}

func sameEntry(a, b Entry) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// An apply cut off (no end) is the last run and stays continuable, even
// with nothing to undo yet.
func TestCompactKeepsTheCutOffRun(t *testing.T) {
	in := append(history()[:12], Entry{Seq: 40, Type: Begin, Apply: "r9"})
	got := Applies(Compact(in, nil))
	if u := Unfinished(got); u == nil || u.ID != "r9" {
		t.Fatalf("unfinished after compaction: %+v", u)
	}
	in = append(in, Entry{Seq: 41, Type: End, Apply: "r9"})
	if u := Unfinished(Applies(Compact(in, nil))); u != nil {
		t.Fatalf("an ended run is continued after compaction: %+v", u)
	}
}

func writeJournal(t *testing.T, dir string, entries []Entry) {
	t.Helper()
	var b bytes.Buffer
	for _, e := range entries {
		line, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Roles of the test binary re-executed by TestCompactionKilled.
const (
	envCompactDir   = "CGWARDEN_JOURNAL_TEST_COMPACT"
	envCompactStage = "CGWARDEN_JOURNAL_TEST_STAGE"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envCompactDir); dir != "" {
		os.Exit(compactChild(dir, os.Getenv(envCompactStage)))
	}
	os.Exit(m.Run())
}

// compactChild compacts the journal in dir and stops forever at stage,
// after saying so, for its parent to SIGKILL it there.
func compactChild(dir, stage string) int {
	j, err := open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	j.crash = func(s string) {
		if s == stage {
			fmt.Println("stopped")
			for {
				time.Sleep(time.Hour)
			}
		}
	}
	if err := j.Compact(nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("finished without stopping")
	return 0
}

// TestCompactionKilled kills a compaction (SIGKILL, in a child process)
// after its new file is written and before the rename, and after the
// rename: the journal that is read next is the old one or the new one,
// whole, and no new file is left behind.
func TestCompactionKilled(t *testing.T) {
	for _, stage := range []string{stageWritten, stageRenamed} {
		t.Run(stage, func(t *testing.T) {
			dir := t.TempDir()
			in := history()
			writeJournal(t, dir, in)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envCompactDir+"="+dir, envCompactStage+"="+stage)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, _ := bufio.NewReader(out).ReadString('\n')
			if strings.TrimSpace(line) != "stopped" {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("child said %q, stderr: %s", line, stderr.String())
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
				t.Fatalf("child was not killed: %v", cmd.ProcessState)
			}
			j := mustOpen(t, dir)
			defer j.Close()
			got := j.Entries()
			want := in
			if stage == stageRenamed {
				want = Compact(in, nil)
			}
			if !slices.EqualFunc(got, want, sameEntry) {
				t.Fatalf("journal after a compaction killed at %s: %v, want %v", stage, seqs(got), seqs(want))
			}
			if _, err := os.Stat(filepath.Join(dir, compactName)); !os.IsNotExist(err) {
				t.Errorf("the compaction's new file is still there after Lock: %v", err)
			}
			// Appends go on after what was kept.
			e, err := j.Append(Entry{Type: Begin, Apply: "r5"})
			if err != nil || e.Seq != 33 {
				t.Fatalf("append after the kill: seq %d, %v", e.Seq, err)
			}
		})
	}
}

// FuzzCompact: whatever a journal file holds that parses, compacting it
// keeps every step a revert still needs as it was (first writes of each
// file, owned cgroups, moves with their processes), writes a file that
// parses again, and is idempotent.
func FuzzCompact(f *testing.F) {
	var b bytes.Buffer
	for _, e := range history() {
		line, _ := json.Marshal(e)
		b.Write(append(line, '\n'))
	}
	f.Add(b.Bytes())
	f.Add([]byte(`{"seq":1,"type":"intent","apply":"a","op":{"kind":"write","path":"/x"},"prev":{"value":"1"}}` + "\n" +
		`{"seq":2,"type":"done","apply":"b","ref":1}` + "\n" + `{"seq":3,"type":"undo-failed","apply":"c","ref":1}` + "\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		entries, _, err := parse(bytes.NewReader(raw), "fuzz", 0)
		if err != nil {
			return
		}
		got := Compact(entries, nil)
		var out bytes.Buffer
		for _, e := range got {
			line, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			out.Write(append(line, '\n'))
		}
		back, good, err := parse(bytes.NewReader(out.Bytes()), "compacted", 0)
		if err != nil || good != int64(out.Len()) || len(back) != len(got) {
			t.Fatalf("the compacted journal does not read back: %v (%d of %d bytes)\n%s", err, good, out.Len(), out.Bytes())
		}
		before, after := Applies(entries), Applies(got)
		if !slices.Equal(Owned(before), Owned(after)) || !maps.Equal(Written(before), Written(after)) {
			t.Fatalf("owned %v → %v, written %v → %v", Owned(before), Owned(after), Written(before), Written(after))
		}
		steps := map[int]*Step{}
		for _, r := range before {
			for _, s := range r.Steps {
				steps[s.Seq] = s
			}
		}
		for _, r := range after {
			for _, s := range r.Steps {
				o := steps[s.Seq]
				if o == nil || !o.NeedsUndo() || s.Status != o.Status || s.UndoFailed != o.UndoFailed ||
					!sameJSON(s.Pids, o.Pids) || !sameJSON(s.Op, o.Op) || !sameJSON(s.Prev, o.Prev) {
					t.Fatalf("step %d after compaction %+v, before %+v", s.Seq, s, o)
				}
			}
		}
		if again := Compact(got, nil); !slices.EqualFunc(again, got, sameEntry) {
			t.Fatalf("compacting twice changed the journal: %v → %v", seqs(got), seqs(again))
		}
	})
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
