package journal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cgwarden/cgwarden/internal/failpoint"
	"github.com/cgwarden/cgwarden/internal/plan"
)

// DefaultDir is where the journal lives unless --journal-dir says
// otherwise.
const DefaultDir = "/var/lib/cgwarden"

// File and lock names inside the journal directory.
const (
	FileName = "journal.jsonl"
	LockName = "lock"
)

// MaxLine bounds one entry; a move of thousands of processes stays far
// below it.
const MaxLine = 4 << 20

// Type is what an entry records.
type Type string

const (
	// Begin opens an apply run; Resume continues one that was cut off.
	Begin  Type = "begin"
	Resume Type = "resume"
	// Intent announces an operation and the state it replaces; written
	// and fsync'd before the operation is applied.
	Intent Type = "intent"
	// Progress records processes a move has moved so far.
	Progress Type = "progress"
	// Done and Failed settle an intent.
	Done   Type = "done"
	Failed Type = "failed"
	// End closes an apply run.
	End Type = "end"
	// RevertBegin, Undone, UndoFailed and RevertEnd record a revert.
	RevertBegin Type = "revert"
	Undone      Type = "undone"
	UndoFailed  Type = "undo-failed"
	RevertEnd   Type = "revert-end"
)

// Entry is one line of the journal.
type Entry struct {
	Seq   int       `json:"seq"`
	Time  time.Time `json:"time"`
	Type  Type      `json:"type"`
	Apply string    `json:"apply"`
	// Ref is the Seq of the intent a Progress, Done, Failed, Undone or
	// UndoFailed entry is about.
	Ref  int        `json:"ref,omitempty"`
	Op   *plan.Op   `json:"op,omitempty"`
	Prev *plan.Prev `json:"prev,omitempty"`
	// Pids are processes moved (Progress, Done: with their start times
	// since they were recorded) or moved back (Undone); Exited are
	// processes that exited before they could be moved.
	Pids   []Proc `json:"pids,omitempty"`
	Exited []int  `json:"exited,omitempty"`
	// Boot is the node's boot ID (procid.Boot) when a move's intent was
	// written: the boot its processes' start times count from. A move's
	// steps all run in the boot of its intent (a run resumed after a
	// reboot makes new intents), so every PID of a step recorded in
	// another boot than the node's now names a new process. Empty in
	// journals written before it was recorded, and on other entries.
	Boot  string `json:"boot,omitempty"`
	Error string `json:"error,omitempty"`
	Note  string `json:"note,omitempty"`
	// By is the command whose run a Begin or Resume entry opens (ByFix,
	// ByServe); empty in journals written before it was recorded, and on
	// other entries.
	By string `json:"by,omitempty"`
}

// The commands a run's By names.
const (
	// ByFix is `cgwarden fix --apply`.
	ByFix = "fix"
	// ByServe is the agent's fixers (`cgwarden serve --fix`).
	ByServe = "serve"
)

// ErrLocked is returned when another cgwarden holds the journal's lock.
var ErrLocked = errors.New("another cgwarden fix or revert is running")

// Journal is the journal of one directory, shared by every writer of one
// process (the agent's adopter and weight holder hold the same
// *Journal). Lock serialises them with a mutex, which waits, and keeps
// other processes out with the directory's flock, which does not: a second
// cgwarden on the node gets ErrLocked. Between two locks the Journal keeps
// the entries it read and the file it read them from open, so the next
// Lock reads only what was appended since (by another process) — the whole
// file only when it was replaced (compacted by another process) or edited.
type Journal struct {
	dir string
	// MinCompact is the size below which CompactIfLarge leaves the file
	// alone (MinCompactSize unless a test lowers it before first use).
	MinCompact int64

	mu     sync.Mutex
	locked atomic.Bool
	// Guarded by mu.
	lock    *os.File // the flock's descriptor, while locked
	f       *os.File // the file entries were read from (kept open: its identity)
	rw      bool     // f is open for writing
	entries []Entry
	size    int64     // bytes of whole entries in f
	mtime   time.Time // f's modification time after the last read or append
	// compacted is the file's size right after this Journal last
	// compacted it (0: not yet).
	compacted int64
	// read counts the bytes parsed (tests check that a Lock reads only
	// the tail).
	read int64
	// crash, when set, is called at the points of a compaction named in
	// compactStages; tests stop there.
	crash func(stage string)
}

// New returns the journal of dir without opening anything; Lock (or
// Snapshot) opens it.
func New(dir string) *Journal {
	return &Journal{dir: dir, MinCompact: MinCompactSize}
}

// Lock waits for this process's other writers, takes the directory's file
// lock (ErrLocked at once when another process holds it), and reads what
// was appended since the last Lock, cutting off a torn last line. Unlock
// releases both.
func (j *Journal) Lock() error {
	j.mu.Lock()
	if err := j.flock(); err != nil {
		j.mu.Unlock()
		return err
	}
	// A compaction cut off before its rename left its new file behind.
	_ = os.Remove(filepath.Join(j.dir, compactName))
	if err := j.refresh(true); err != nil {
		j.lock.Close()
		j.lock = nil
		j.mu.Unlock()
		return err
	}
	j.locked.Store(true)
	return nil
}

func (j *Journal) flock() error {
	if err := os.MkdirAll(j.dir, 0o700); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(j.dir, LockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("journal %s: %w (lock %s is held)", j.dir, ErrLocked, lock.Name())
		}
		return fmt.Errorf("journal: lock %s: %w", lock.Name(), err)
	}
	j.lock = lock
	return nil
}

// Unlock releases the file lock and lets this process's next writer in.
// The file stays open, so the next Lock reads only its tail.
func (j *Journal) Unlock() error {
	if !j.locked.Load() {
		return errors.New("journal: Unlock without Lock")
	}
	j.locked.Store(false)
	err := j.lock.Close()
	j.lock = nil
	j.mu.Unlock()
	return err
}

// Close releases the lock if it is held (Locked and not Unlocked) and the
// file. A shared Journal is closed by its owner once no writer uses it.
func (j *Journal) Close() error {
	if !j.locked.Load() {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.closeFile()
	}
	err := j.closeFile()
	if uerr := j.Unlock(); err == nil {
		err = uerr
	}
	return err
}

func (j *Journal) closeFile() error {
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f, j.entries, j.size = nil, nil, 0
	return err
}

// Snapshot returns a copy of the entries as they are now, reading what was
// appended since the last read. It waits for this process's writers but
// not for another process's: without the file lock it reads only whole
// lines and cuts nothing off. A missing journal is empty.
func (j *Journal) Snapshot() ([]Entry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.refresh(false); err != nil {
		return nil, err
	}
	return slices.Clone(j.entries), nil
}

// HasUnfinished reports whether the journal's last run was cut off
// (Unfinished), reading only what was appended since the last read and
// without the file lock: what an apply with nothing new to do would
// resume. The agent's adopter asks it before an idle scan, instead of
// locking the journal at every scan.
func (j *Journal) HasUnfinished() (bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.refresh(false); err != nil {
		return false, err
	}
	return Unfinished(Applies(j.entries)) != nil, nil
}

// refresh brings entries up to date with the file: only its tail when f is
// still the file at the journal's path, unchanged up to size; the whole of
// it otherwise. write (the file lock is held) creates a missing file and
// cuts off a torn last line.
func (j *Journal) refresh(write bool) error {
	name := filepath.Join(j.dir, FileName)
	if j.f != nil {
		st, err := os.Stat(name)
		fst, ferr := j.f.Stat()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("journal: %w", err)
		}
		if err != nil || ferr != nil || !os.SameFile(st, fst) {
			// Replaced (compacted by another process) or removed.
			j.closeFile()
		}
	}
	if j.f != nil && write && !j.rw {
		j.closeFile() // opened by Snapshot, for reading only
	}
	if j.f == nil {
		flag := os.O_RDONLY
		if write {
			flag = os.O_RDWR | os.O_CREATE
		}
		f, err := os.OpenFile(name, flag, 0o600)
		if !write && errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		j.f, j.rw, j.entries, j.size, j.compacted = f, write, nil, 0, 0
		return j.reread(write)
	}
	st, err := j.f.Stat()
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	switch {
	case st.Size() == j.size && st.ModTime().Equal(j.mtime):
		return nil
	case st.Size() <= j.size:
		return j.reread(write) // edited in place
	}
	last := 0
	if n := len(j.entries); n > 0 {
		last = j.entries[n-1].Seq
	}
	more, good, err := parse(io.NewSectionReader(j.f, j.size, st.Size()-j.size), j.f.Name(), last)
	if err != nil {
		// Not a continuation of what was read: read it all again, which
		// also names the right line if it is corrupt.
		return j.reread(write)
	}
	j.entries = append(j.entries, more...)
	j.size += good
	j.read += good
	return j.settle(write, st)
}

// reread reads the whole file.
func (j *Journal) reread(write bool) error {
	entries, good, err := parse(io.NewSectionReader(j.f, 0, 1<<62), j.f.Name(), 0)
	if err != nil {
		j.closeFile()
		return err
	}
	j.entries, j.size = entries, good
	j.read += good
	st, err := j.f.Stat()
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return j.settle(write, st)
}

// settle cuts a torn tail off (with the lock held) and notes the file's
// modification time.
func (j *Journal) settle(write bool, st os.FileInfo) error {
	if write && st.Size() != j.size {
		if err := truncate(j.f, j.size); err != nil {
			return err
		}
		if st, err := j.f.Stat(); err == nil {
			j.mtime = st.ModTime()
		}
		return nil
	}
	j.mtime = st.ModTime()
	return nil
}

// truncate cuts the file to size (dropping a torn tail).
func truncate(f *os.File, size int64) error {
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("journal: cutting off a torn last entry: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// CorruptError is a journal line that is not a valid entry (and is not a
// torn last line).
type CorruptError struct {
	File string
	Line int
	Err  error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal %s line %d is corrupt: %v (cgwarden will not guess what was changed; inspect or move the file)", e.File, e.Line, e.Err)
}
func (e *CorruptError) Unwrap() error { return e.Err }

// parse reads entries and returns the length of the prefix made of whole
// lines. Only the last line may be torn (no newline); anything else that
// does not parse is corruption, and so are sequence numbers that do not
// grow (after is the last one before r; Append numbers each entry one
// above the last, and compaction keeps the numbers).
func parse(r io.Reader, name string, after int) ([]Entry, int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var out []Entry
	var good int64
	last := after
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if err == io.EOF {
			return out, good, nil // b, if any, is a torn tail
		}
		if err != nil {
			return nil, 0, fmt.Errorf("journal %s: %w", name, err)
		}
		if len(b) > MaxLine {
			return nil, 0, &CorruptError{name, line, errors.New("entry too long")}
		}
		var e Entry
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, 0, &CorruptError{name, line, err}
		}
		if len(bytes.TrimSpace(b[dec.InputOffset():])) > 0 {
			return nil, 0, &CorruptError{name, line, errors.New("more than one entry on the line")}
		}
		if e.Type == "" || e.Apply == "" {
			return nil, 0, &CorruptError{name, line, errors.New("entry without type or apply id")}
		}
		if e.Seq <= last {
			return nil, 0, &CorruptError{name, line, fmt.Errorf("sequence number %d does not follow %d", e.Seq, last)}
		}
		last = e.Seq
		out = append(out, e)
		good += int64(len(b))
	}
}

// Entries returns every entry, oldest first, while the journal is locked.
// The slice must not be modified.
func (j *Journal) Entries() []Entry { return j.entries }

// Dir is the journal's directory.
func (j *Journal) Dir() string { return j.dir }

// Size is the journal file's size in bytes, while it is locked.
func (j *Journal) Size() int64 { return j.size }

// Append numbers e, writes it as one line and fsyncs the file; the journal
// must be locked. When the write or the sync fails (a full disk), the file
// is cut back to where it was, so the journal never holds half an entry,
// and the error says so: the caller must not apply the operation it
// announced.
func (j *Journal) Append(e Entry) (Entry, error) {
	if !j.locked.Load() {
		return e, errors.New("journal: Append without Lock")
	}
	e.Seq = 1
	if n := len(j.entries); n > 0 {
		e.Seq = j.entries[n-1].Seq + 1
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if failpoint.Hit("journal/before-append") {
		// A test build that drops this append (the fault suite proves
		// its invariants can fail with it).
		return e, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return e, fmt.Errorf("journal: %w", err)
	}
	b = append(b, '\n')
	n, err := j.f.WriteAt(b, j.size)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err == nil {
		err = j.f.Sync()
	}
	if err != nil {
		werr := fmt.Errorf("journal %s: recording %s: %w", j.f.Name(), e.Type, err)
		if terr := truncate(j.f, j.size); terr != nil {
			return e, errors.Join(werr, terr)
		}
		return e, werr
	}
	j.size += int64(len(b))
	j.entries = append(j.entries, e)
	if st, err := j.f.Stat(); err == nil {
		j.mtime = st.ModTime()
	}
	failpoint.Hit("journal/after-append")
	return e, nil
}
