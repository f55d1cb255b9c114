package nriplugin

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cgwarden/cgwarden/internal/layout"
)

// LearnedFile is the name of the file, beside the journal, that lists the
// runtime handlers the agent has seen misplace containers on this node.
const LearnedFile = "nri-handlers"

// handlerRe is a RuntimeClass handler: a DNS label (node.k8s.io/v1
// validates it so).
var handlerRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ValidHandler reports why name cannot be a runtime handler, or nil.
func ValidHandler(name string) error {
	if !handlerRe.MatchString(name) {
		return fmt.Errorf("runtime handler %q is not a DNS label (lower-case letters, digits and '-', at most 63)", name)
	}
	return nil
}

// LearnedTTL is how long a learned handler stays listed after the agent
// last saw it misplace a container. The plugin cannot see whether a
// runtime still misplaces while it places that runtime's containers, so a
// handler is forgotten after this age: its next container is created
// where the runtime puts it, and if the runtime still misplaces it the
// agent adopts it within one interval and learns the handler again. The
// cost of a runtime that was fixed is nothing; of one that was not, one
// container adopted instead of placed per week.
const LearnedTTL = 7 * 24 * time.Hour

// relearnAfter: a handler seen again is rewritten only when its time in
// the file is older than this, not at every adoption.
const relearnAfter = time.Hour

// Learned is one line of the learned file: a handler and when the agent
// last saw it misplace a container.
type Learned struct {
	Handler string
	// Seen is zero for a line without a time (a file written before
	// learned handlers expired): such a handler is not listed.
	Seen time.Time
}

// ParseLearned reads a handlers file: one "<handler> <RFC 3339 time>" per
// line (a handler alone is read with no time); blank lines and lines
// starting with # are ignored. A line that is not one is an error naming
// it, not skipped. A handler listed twice keeps its latest time.
func ParseLearned(r io.Reader) ([]Learned, error) {
	var out []Learned
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if err := ValidHandler(f[0]); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		l := Learned{Handler: f[0]}
		switch len(f) {
		case 1:
		case 2:
			t, err := time.Parse(time.RFC3339, f[1])
			if err != nil {
				return nil, fmt.Errorf("line %d: %q is not an RFC 3339 time", n, f[1])
			}
			l.Seen = t
		default:
			return nil, fmt.Errorf("line %d: want a handler and a time, got %d fields", n, len(f))
		}
		if i := slices.IndexFunc(out, func(o Learned) bool { return o.Handler == l.Handler }); i >= 0 {
			if l.Seen.After(out[i].Seen) {
				out[i].Seen = l.Seen
			}
			continue
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// listed reports whether l is still in force at now.
func (l Learned) listed(now time.Time) bool {
	return !l.Seen.IsZero() && now.Sub(l.Seen) < LearnedTTL
}

// LiteralMisplacement reports whether a cgroup directory (a path; its last
// element counts) has the runtime-literal shape "<slice>:<prefix>:<id>":
// a systemd cgroupsPath that a runtime without systemd support made a
// directory of. It is the only misplacement that placing the container's
// cgroupsPath cures, so the only one a handler is learned from.
func LiteralMisplacement(dir string) bool {
	return layout.Child(layout.Root(), filepath.Base(dir)).Shape == layout.ShapeLiteralPath
}

// Learn notes in the handlers file at path (creating it) that handler
// misplaced a container at now. The file is written whole to a temporary
// file and renamed over the old one, so a reader never sees half a file;
// handlers past LearnedTTL are dropped from it.
func Learn(path, handler string, now time.Time) error {
	if err := ValidHandler(handler); err != nil {
		return err
	}
	var have []Learned
	f, err := os.Open(path)
	switch {
	case err == nil:
		have, err = ParseLearned(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	case !os.IsNotExist(err):
		return err
	}
	if i := slices.IndexFunc(have, func(l Learned) bool { return l.Handler == handler }); i >= 0 && have[i].listed(now) && now.Sub(have[i].Seen) < relearnAfter {
		return nil
	}
	have = slices.DeleteFunc(have, func(l Learned) bool { return l.Handler == handler || !l.listed(now) })
	have = append(have, Learned{Handler: handler, Seen: now.UTC()})
	var b strings.Builder
	b.WriteString("# Runtime handlers cgwarden saw misplace containers on this node (literal \"<slice>:<prefix>:<id>\" cgroups),\n")
	b.WriteString("# with when it last did; its NRI plugin places their containers for " + LearnedTTL.String() + " after that.\n")
	for _, l := range have {
		b.WriteString(l.Handler + " " + l.Seen.Format(time.RFC3339) + "\n")
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // nothing left to remove once renamed
	_, err = tmp.WriteString(b.String())
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Handlers is the set of runtime handlers whose containers are placed: the
// configured ones and those in the learned file, read again whenever the
// file changes (one stat per container creation).
type Handlers struct {
	fixed []string
	path  string
	// onErr is told when the learned file cannot be read or parsed; the
	// last good set stays in force.
	onErr func(error)

	// now is the clock learned handlers expire by.
	now func() time.Time

	mu      sync.Mutex
	learned []Learned
	// seen is the file as last read: Learn replaces the file by rename, so
	// a new file (a new inode) is a change even when its size and
	// timestamp are the old one's (two rewrites inside one tick of the
	// kernel's coarse file clock, with lines of equal length).
	seen os.FileInfo
}

// NewHandlers lists fixed, and the handlers in the file at path ("" for
// none).
func NewHandlers(fixed []string, path string, onErr func(error)) *Handlers {
	if onErr == nil {
		onErr = func(error) {}
	}
	return &Handlers{fixed: fixed, path: path, onErr: onErr, now: time.Now}
}

// Listed reports whether containers of handler are placed.
func (h *Handlers) Listed(handler string) bool {
	if slices.Contains(h.fixed, handler) {
		return true
	}
	if h.path == "" {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reload()
	i := slices.IndexFunc(h.learned, func(l Learned) bool { return l.Handler == handler })
	return i >= 0 && h.learned[i].listed(h.now())
}

// reload reads the learned file when it was replaced, or its size or time
// changed.
func (h *Handlers) reload() {
	st, err := os.Stat(h.path)
	if err != nil {
		if !os.IsNotExist(err) {
			h.onErr(err)
			return
		}
		// No file: nothing learned (yet, or any more).
		h.learned, h.seen = nil, nil
		return
	}
	if h.seen != nil && os.SameFile(st, h.seen) && st.ModTime().Equal(h.seen.ModTime()) && st.Size() == h.seen.Size() {
		return
	}
	got, err := readHandlers(h.path)
	if err != nil {
		h.onErr(err)
		return
	}
	h.learned, h.seen = got, st
}

func readHandlers(path string) ([]Learned, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("not a regular file")}
	}
	// A handlers file is a few lines; more than 64 KiB is not one.
	hs, err := ParseLearned(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return hs, nil
}
