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

// ParseHandlers reads a handlers file: one handler per line; blank lines
// and lines starting with # are ignored. A line that is not a handler is
// an error naming it, not skipped.
func ParseHandlers(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := ValidHandler(line); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if !slices.Contains(out, line) {
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Learn adds handler to the handlers file at path (creating it), written
// whole to a temporary file and renamed over the old one, so a reader
// never sees half a file.
func Learn(path, handler string) error {
	if err := ValidHandler(handler); err != nil {
		return err
	}
	var have []string
	f, err := os.Open(path)
	switch {
	case err == nil:
		have, err = ParseHandlers(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	case !os.IsNotExist(err):
		return err
	}
	if slices.Contains(have, handler) {
		return nil
	}
	have = append(have, handler)
	var b strings.Builder
	b.WriteString("# Runtime handlers cgwarden saw misplace containers on this node; its NRI plugin places their containers.\n")
	for _, h := range have {
		b.WriteString(h + "\n")
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(b.String()); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
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

	mu      sync.Mutex
	learned []string
	mtime   time.Time
	size    int64
}

// NewHandlers lists fixed, and the handlers in the file at path ("" for
// none).
func NewHandlers(fixed []string, path string, onErr func(error)) *Handlers {
	if onErr == nil {
		onErr = func(error) {}
	}
	return &Handlers{fixed: fixed, path: path, onErr: onErr}
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
	return slices.Contains(h.learned, handler)
}

// reload reads the learned file when its size or time changed.
func (h *Handlers) reload() {
	st, err := os.Stat(h.path)
	if err != nil {
		if !os.IsNotExist(err) {
			h.onErr(err)
			return
		}
		// No file: nothing learned (yet, or any more).
		h.learned, h.mtime, h.size = nil, time.Time{}, 0
		return
	}
	if st.ModTime().Equal(h.mtime) && st.Size() == h.size {
		return
	}
	got, err := readHandlers(h.path)
	if err != nil {
		h.onErr(err)
		return
	}
	h.learned, h.mtime, h.size = got, st.ModTime(), st.Size()
}

func readHandlers(path string) ([]string, error) {
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
	hs, err := ParseHandlers(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return hs, nil
}
