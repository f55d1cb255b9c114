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
	"time"

	"golang.org/x/sys/unix"

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
	// Pids are processes moved (Progress, Done) or moved back (Undone);
	// Exited are processes that exited before they could be moved.
	Pids   []int  `json:"pids,omitempty"`
	Exited []int  `json:"exited,omitempty"`
	Error  string `json:"error,omitempty"`
	Note   string `json:"note,omitempty"`
}

// ErrLocked is returned when another cgwarden holds the journal's lock.
var ErrLocked = errors.New("another cgwarden fix or revert is running")

// Journal is an open, locked journal.
type Journal struct {
	dir     string
	f       *os.File
	lock    *os.File
	entries []Entry
	size    int64
}

// Open creates dir if needed, takes the lock and reads the journal,
// cutting off a torn last line.
func Open(dir string) (*Journal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, LockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("journal %s: %w (lock %s is held)", dir, ErrLocked, lock.Name())
		}
		return nil, fmt.Errorf("journal: lock %s: %w", lock.Name(), err)
	}
	name := filepath.Join(dir, FileName)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("journal: %w", err)
	}
	entries, good, err := parse(f, name)
	if err == nil {
		err = truncate(f, good)
	}
	if err != nil {
		f.Close()
		lock.Close()
		return nil, err
	}
	return &Journal{dir: dir, f: f, lock: lock, entries: entries, size: good}, nil
}

// truncate cuts the file to size (dropping a torn tail) and positions
// writes there.
func truncate(f *os.File, size int64) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if st.Size() != size {
		if err := f.Truncate(size); err != nil {
			return fmt.Errorf("journal: cutting off a torn last entry: %w", err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
	}
	if _, err := f.Seek(size, io.SeekStart); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// Read reads the journal in dir without locking it, for a dry run. A
// missing journal is empty; a torn last line is ignored.
func Read(dir string) ([]Entry, error) {
	name := filepath.Join(dir, FileName)
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	entries, _, err := parse(f, name)
	return entries, err
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
// does not parse is corruption.
func parse(r io.Reader, name string) ([]Entry, int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var out []Entry
	var good int64
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
		if e.Type == "" || e.Apply == "" {
			return nil, 0, &CorruptError{name, line, errors.New("entry without type or apply id")}
		}
		out = append(out, e)
		good += int64(len(b))
	}
}

// Entries returns every entry, oldest first. The slice must not be
// modified.
func (j *Journal) Entries() []Entry { return j.entries }

// Dir is the journal's directory.
func (j *Journal) Dir() string { return j.dir }

// Append numbers e, writes it as one line and fsyncs the file. When the
// write or the sync fails (a full disk), the file is cut back to where it
// was, so the journal never holds half an entry, and the error says so:
// the caller must not apply the operation it announced.
func (j *Journal) Append(e Entry) (Entry, error) {
	e.Seq = 1
	if n := len(j.entries); n > 0 {
		e.Seq = j.entries[n-1].Seq + 1
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return e, fmt.Errorf("journal: %w", err)
	}
	b = append(b, '\n')
	n, err := j.f.Write(b)
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
	return e, nil
}

// Close releases the file and the lock.
func (j *Journal) Close() error {
	err := j.f.Close()
	if lerr := j.lock.Close(); err == nil {
		err = lerr
	}
	return err
}
