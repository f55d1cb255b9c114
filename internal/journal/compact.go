package journal

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/cgwarden/cgwarden/internal/plan"
)

// MinCompactSize is the size below which CompactIfLarge leaves a journal
// alone: a node's whole history of a few hundred runs.
const MinCompactSize = 64 << 10

// compactName is the new file a compaction writes before renaming it over
// the journal.
const compactName = FileName + ".compact"

// Points of a compaction where tests stop it (Journal.crash).
const (
	// stageWritten: the new file is written and fsync'd, not renamed.
	stageWritten = "written"
	// stageRenamed: the new file is renamed over the journal, the
	// directory not fsync'd.
	stageRenamed = "renamed"
)

// Compact returns what of entries a revert, a resumed apply, Owned and
// Written still need, in order, with their sequence numbers. A step stays
// when a revert would have to settle it (Step.NeedsUndo), except:
//
//   - a mkdir of a directory that was there before (a revert leaves it);
//   - a write of a file an older kept step wrote: that one holds the value
//     the file had before cgwarden (the kubelet's or the runtime's), which
//     is what `revert --all` ends up restoring;
//   - a step gone says is gone (may be nil): its cgroup no longer exists,
//     so a revert could only say so.
//
// A kept step's progress and outcome entries become one (its processes
// together); undone steps, failed writes and runs left with no step go,
// and so do their entries. A kept run keeps its first entry, its end and
// its revert marks; the last run always keeps them, so an apply continues
// a cut-off run exactly as before. Compact(Compact(e)) = Compact(e).
func Compact(entries []Entry, gone func(*Step) bool) []Entry {
	runs := Applies(entries)
	keep := map[int]string{} // intent seq → run
	keptRun := map[string]bool{}
	first := map[string]bool{} // files a kept write step wrote
	for _, r := range runs {
		for _, s := range r.Steps {
			if !s.NeedsUndo() || s.Op.Kind == plan.Mkdir && s.Prev.Existed {
				continue
			}
			if gone != nil && gone(s) {
				continue
			}
			if s.Op.Kind == plan.Write || s.Op.Kind == plan.Property {
				p := string(s.Op.Kind) + " " + path.Clean(s.Op.Path)
				if first[p] {
					continue
				}
				first[p] = true
			}
			keep[s.Seq] = r.ID
			keptRun[r.ID] = true
		}
	}
	if n := len(runs); n > 0 {
		keptRun[runs[n-1].ID] = true
	}

	// The last index of each kind of entry that is kept once.
	type key struct {
		run string
		ref int
		t   Type
	}
	lastAt := map[key]int{}
	outcome := map[int]*Entry{} // intent seq → merged progress and outcome
	outcomeAt := map[int]int{}  // intent seq → index of its last outcome entry
	firstOf := map[string]int{}
	intents := map[int]bool{}
	for i, e := range entries {
		if _, ok := firstOf[e.Apply]; !ok {
			firstOf[e.Apply] = i
		}
		switch e.Type {
		case Intent:
			if e.Op != nil {
				intents[e.Seq] = true
			}
		case Progress, Done, Failed:
			run, ok := keep[e.Ref]
			if !ok || !intents[e.Ref] {
				continue
			}
			o := outcome[e.Ref]
			if o == nil {
				o = &Entry{Type: Progress, Apply: run, Ref: e.Ref}
				outcome[e.Ref] = o
			}
			o.Seq, o.Time = e.Seq, e.Time
			o.Pids = append(o.Pids, e.Pids...)
			o.Exited = append(o.Exited, e.Exited...)
			if e.Type != Progress {
				o.Type, o.Error, o.Note = e.Type, e.Error, e.Note
			}
			outcomeAt[e.Ref] = i
		case UndoFailed:
			if _, ok := keep[e.Ref]; ok && intents[e.Ref] {
				lastAt[key{ref: e.Ref, t: UndoFailed}] = i
			}
		case End, RevertBegin, RevertEnd:
			lastAt[key{run: e.Apply, t: e.Type}] = i
		}
	}

	var out []Entry
	for i, e := range entries {
		if !keptRun[e.Apply] && e.Type != Progress && e.Type != Done && e.Type != Failed && e.Type != UndoFailed {
			continue
		}
		var add *Entry
		switch e.Type {
		case Intent:
			if _, ok := keep[e.Seq]; ok && e.Op != nil {
				add = &e
			}
		case Progress, Done, Failed:
			if o := outcome[e.Ref]; o != nil && outcomeAt[e.Ref] == i {
				add = o
			}
		case UndoFailed:
			if lastAt[key{ref: e.Ref, t: UndoFailed}] == i {
				if run, ok := keep[e.Ref]; ok && intents[e.Ref] {
					e.Apply = run
					add = &e
				}
			}
		case End, RevertBegin, RevertEnd:
			if lastAt[key{run: e.Apply, t: e.Type}] == i {
				add = &e
			}
		}
		if add == nil && firstOf[e.Apply] == i && keptRun[e.Apply] {
			// A run's first entry places it among the runs.
			add = &Entry{Seq: e.Seq, Time: e.Time, Type: Begin, Apply: e.Apply}
			if e.Type == Begin || e.Type == Resume {
				add = &e
			}
		}
		if add != nil {
			out = append(out, *add)
		}
	}
	return out
}

// Oversized reports whether the journal has grown past twice its size
// after its last compaction (and past MinCompact): the bound on its size
// is max(MinCompact, 2 × its compacted size) plus one run.
func (j *Journal) Oversized() bool {
	return j.size > max(j.MinCompact, 2*j.compacted)
}

// CompactIfLarge compacts the locked journal when it is Oversized.
func (j *Journal) CompactIfLarge(gone func(*Step) bool) error {
	if !j.Oversized() {
		return nil
	}
	return j.Compact(gone)
}

// Compact replaces the locked journal's file with its compacted entries
// (see the function Compact). It is crash-safe: the entries are written to
// a new file in the same directory and fsync'd, the new file is renamed
// over the journal and the directory fsync'd, so a crash at any point
// leaves either the old journal or the new one, whole (a new file left
// behind before its rename is removed by the next Lock).
func (j *Journal) Compact(gone func(*Step) bool) error {
	if !j.locked.Load() {
		return errors.New("journal: Compact without Lock")
	}
	kept := Compact(j.entries, gone)
	name := filepath.Join(j.dir, FileName)
	tmp := filepath.Join(j.dir, compactName)
	f, size, err := writeNew(tmp, kept)
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	j.stop(stageWritten)
	if err := os.Rename(tmp, name); err != nil {
		f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("journal: compacting: %w", err)
	}
	j.stop(stageRenamed)
	// The path names the new file now, whatever the directory's sync
	// says.
	j.f.Close()
	j.f, j.rw, j.entries, j.size, j.compacted = f, true, kept, size, size
	if st, err := f.Stat(); err == nil {
		j.mtime = st.ModTime()
	}
	if err := syncDir(j.dir); err != nil {
		return fmt.Errorf("journal: compacted, but %w", err)
	}
	return nil
}

func (j *Journal) stop(stage string) {
	if j.crash != nil {
		j.crash(stage)
	}
}

// writeNew writes entries to a new file and fsyncs it.
func writeNew(name string, entries []Entry) (*os.File, int64, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("journal: compacting: %w", err)
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	var size int64
	for _, e := range entries {
		b, err := json.Marshal(e)
		if err == nil {
			b = append(b, '\n')
			_, err = bw.Write(b)
		}
		if err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("journal: compacting: %w", err)
		}
		size += int64(len(b))
	}
	err = bw.Flush()
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("journal: compacting: %w", err)
	}
	return f, size, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
