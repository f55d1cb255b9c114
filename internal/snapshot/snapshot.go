package snapshot

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/tools/txtar"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/mounts"
)

// Limits on a snapshot file.
const (
	MaxBytes = 256 << 20
	// MaxFiles bounds the sections: a node of 5,000 containers needs
	// about 100,000 (files of every cgroup, thread lists, schedstat).
	MaxFiles    = 500_000
	MaxPathLen  = 4096
	magicHeader = "cgwarden snapshot v1"
	nextPrefix  = "next:"
	// gonePrefix names a directory of the first sample that the second
	// no longer has (a cgroup removed between the two).
	gonePrefix = "next-gone:"
	// failedPrefix names a file that existed but could not be read (the
	// section holds the error), so a replay fails where the node did.
	failedPrefix     = "failed:"
	nextFailedPrefix = "next-failed:"
	maxErrorText     = 200
	mountinfo        = "/proc/self/mountinfo"
	// sealHeader is the header key of a snapshot that ends with an
	// endSection: its value names the checksum ("sha256").
	sealHeader = "seal"
	sealSHA256 = "sha256"
	// endSection closes a sealed snapshot: the count of the sections
	// before it and the SHA-256 of every byte before its own marker line,
	// so that a file cut short or edited is refused instead of replayed
	// as a smaller, healthy-looking node.
	endSection = "cgwarden-end"
)

// fixedPaths are the non-cgroup files cgwarden reads.
var fixedPrefixes = []string{"/proc", "/sys/devices/system/cpu"}

// Snapshot is a loaded snapshot file.
type Snapshot struct {
	// Header holds the header lines ("taken", "interval", "origin", ...).
	Header  map[string]string
	Notes   []string
	Samples []cgroupfs.Sample
	// Sealed reports that the file proved it is whole: it ends with the
	// closing section, whose count and checksum match. Snapshots written
	// before sealing existed load with Sealed false; callers warn.
	Sealed bool
}

// files is a snapshot's view of a filesystem.
type files struct {
	data map[string][]byte
	dirs map[string][]string // dir → sorted child dir names; nil: the base's
	base *files              // the first sample, for files a later one did not change
	gone []string            // directories of the base this sample no longer has
	// fails are files that could not be read, with the error's text.
	fails map[string]string
}

var _ cgroupfs.FS = (*files)(nil)

func (f *files) ReadFile(p string) ([]byte, error) {
	if b, ok := f.data[p]; ok {
		return b, nil
	}
	if msg, ok := f.fails[p]; ok {
		return nil, &fs.PathError{Op: "read", Path: p, Err: errors.New(msg)}
	}
	if f.base != nil && !slices.ContainsFunc(f.gone, func(d string) bool { return cgroupfs.Within(p, d) }) {
		return f.base.ReadFile(p)
	}
	return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
}

func (f *files) ReadDirs(p string) ([]string, error) {
	if f.dirs == nil && f.base != nil {
		return f.base.ReadDirs(p)
	}
	if d, ok := f.dirs[p]; ok {
		return slices.Clone(d), nil
	}
	return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
}

// LoadError is a snapshot that cannot be used.
type LoadError struct {
	Section string // the offending section name, if any
	Why     string
}

func (e *LoadError) Error() string {
	if e.Section != "" {
		return fmt.Sprintf("snapshot: section %q: %s", clip(e.Section), e.Why)
	}
	return "snapshot: " + e.Why
}

// Load reads a snapshot (plain or gzip-compressed).
func Load(r io.Reader) (*Snapshot, error) {
	raw, err := io.ReadAll(io.LimitReader(r, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if len(raw) > 1 && raw[0] == 0x1f && raw[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, &LoadError{Why: "bad gzip: " + err.Error()}
		}
		if raw, err = io.ReadAll(io.LimitReader(zr, MaxBytes+1)); err != nil {
			return nil, &LoadError{Why: "bad gzip: " + err.Error()}
		}
	}
	if len(raw) > MaxBytes {
		return nil, &LoadError{Why: fmt.Sprintf("larger than %d MiB", MaxBytes>>20)}
	}
	return parse(raw)
}

func parse(raw []byte) (*Snapshot, error) {
	// Count the sections before parsing them, so that a hostile file of
	// tiny sections is refused before it costs memory.
	if n := bytes.Count(raw, []byte("\n-- ")); n > MaxFiles {
		return nil, &LoadError{Why: fmt.Sprintf("more than %d sections", MaxFiles)}
	}
	ar := txtar.Parse(raw)
	s, err := parseHeader(raw, ar)
	if err != nil {
		return nil, err
	}
	if len(ar.Files) > MaxFiles {
		return nil, &LoadError{Why: fmt.Sprintf("more than %d sections", MaxFiles)}
	}
	sec, err := readSections(ar.Files)
	if err != nil {
		return nil, err
	}
	if err := sec.checkPlaces(); err != nil {
		return nil, err
	}
	if err := sec.trees(); err != nil {
		return nil, err
	}
	if err := s.addSamples(sec.first, sec.next); err != nil {
		return nil, err
	}
	return s, nil
}

// parseHeader reads the snapshot's header (the archive's comment) and
// checks its seal; a sealed archive loses its closing section.
func parseHeader(raw []byte, ar *txtar.Archive) (*Snapshot, error) {
	s := &Snapshot{Header: map[string]string{}}
	sealed, err := checkSeal(raw, ar)
	if err != nil {
		return nil, err
	}
	if sealed {
		ar.Files = ar.Files[:len(ar.Files)-1]
	}
	lines := strings.Split(strings.TrimRight(string(ar.Comment), "\n"), "\n")
	if len(lines) == 0 || strings.TrimSpace(lines[0]) != magicHeader {
		return nil, &LoadError{Why: fmt.Sprintf("not a cgwarden snapshot (the first line must be %q)", magicHeader)}
	}
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			if l != "" {
				s.Notes = append(s.Notes, strings.TrimSpace(strings.TrimPrefix(l, "#")))
			}
			continue
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return nil, &LoadError{Why: fmt.Sprintf("header line %q is not \"key: value\"", clip(l))}
		}
		s.Header[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	switch seal, ok := s.Header[sealHeader]; {
	case ok && seal != sealSHA256:
		return nil, &LoadError{Why: fmt.Sprintf("header seal: %q is not a seal this cgwarden knows (want %q)", clip(seal), sealSHA256)}
	case ok && !sealed:
		return nil, &LoadError{Why: fmt.Sprintf("the file is cut short or was edited: its header says it ends with a %q section, and it does not (its last section is %s)", endSection, lastSection(ar))}
	case !ok && sealed:
		return nil, &LoadError{Section: endSection, Why: "the header has no \"seal\" line: the file was edited"}
	}
	s.Sealed = sealed
	return s, nil
}

// sections are a snapshot's sections sorted into its two samples.
type sections struct {
	first, next *files
	// dirs are the first sample's directories; added and gone the ones
	// the second sample made and removed.
	dirs, added, gone map[string]bool
}

// readSections sorts the archive's sections into the first sample's
// files and directories and what the second sample changed.
func readSections(ar []txtar.File) (*sections, error) {
	first := &files{data: map[string][]byte{}, dirs: map[string][]string{}}
	sec := &sections{first: first, next: &files{data: map[string][]byte{}, base: first},
		dirs: map[string]bool{}, added: map[string]bool{}, gone: map[string]bool{}}
	for _, f := range ar {
		name := f.Name
		target := sec.first
		if rest, ok := strings.CutPrefix(name, gonePrefix); ok {
			if err := checkName(rest); err != nil || !strings.HasSuffix(rest, "/") || rest == "/" {
				return nil, &LoadError{Section: f.Name, Why: "a removed directory must be a clean absolute path ending in /"}
			}
			sec.gone[path.Clean(rest)] = true
			continue
		}
		if rest, ok := strings.CutPrefix(name, nextFailedPrefix); ok {
			name, target = failedPrefix+rest, sec.next
		}
		if rest, ok := strings.CutPrefix(name, nextPrefix); ok {
			name, target = rest, sec.next
		}
		if rest, ok := strings.CutPrefix(name, failedPrefix); ok {
			msg := strings.TrimSpace(string(f.Data))
			if err := checkName(rest); err != nil || strings.HasSuffix(rest, "/") {
				return nil, &LoadError{Section: f.Name, Why: "a failed read must name a file by a clean absolute path"}
			}
			if msg == "" || len(msg) > maxErrorText || strings.ContainsRune(msg, '\n') {
				return nil, &LoadError{Section: f.Name, Why: fmt.Sprintf("a failed read holds one line of at most %d bytes saying why", maxErrorText)}
			}
			if target.fails == nil {
				target.fails = map[string]string{}
			}
			target.fails[rest] = msg
			continue
		}
		if err := checkName(name); err != nil {
			return nil, &LoadError{Section: f.Name, Why: err.Error()}
		}
		if strings.HasSuffix(name, "/") {
			if target == sec.next {
				sec.added[path.Clean(name)] = true
			} else {
				sec.dirs[path.Clean(name)] = true
			}
			continue
		}
		if _, dup := target.data[name]; dup {
			return nil, &LoadError{Section: f.Name, Why: "appears twice"}
		}
		target.data[name] = f.Data
		if target == sec.first {
			sec.dirs[path.Dir(name)] = true
		}
	}
	return sec, nil
}

// checkPlaces refuses a file or directory that is neither beneath a
// cgroup mount of the snapshot's mountinfo nor a file cgwarden reads.
func (sec *sections) checkPlaces() error {
	mi, ok := sec.first.data[mountinfo]
	if !ok {
		return &LoadError{Why: "no " + mountinfo + " section"}
	}
	table, err := mounts.Parse(string(mi))
	if err != nil {
		return &LoadError{Section: mountinfo, Why: err.Error()}
	}
	points := table.Points()
	for _, set := range []*files{sec.first, sec.next} {
		for name := range set.data {
			if !allowed(name, points) {
				return &LoadError{Section: name, Why: "not beneath a cgroup mount of this snapshot nor a file cgwarden reads"}
			}
		}
		for name := range set.fails {
			if !allowed(name, points) {
				return &LoadError{Section: failedPrefix + name, Why: "not beneath a cgroup mount of this snapshot nor a file cgwarden reads"}
			}
		}
	}
	for _, set := range []map[string]bool{sec.dirs, sec.added, sec.gone} {
		for d := range set {
			if !allowed(d, points) && !slices.ContainsFunc(points, func(p string) bool { return cgroupfs.Within(p, d) }) {
				return &LoadError{Section: d + "/", Why: "not beneath a cgroup mount of this snapshot"}
			}
		}
	}
	return nil
}

// trees indexes the first sample's directories and, when the second
// sample made or removed any, the second's: the first's, less what was
// removed, plus what was made (and the directories of its new files).
func (sec *sections) trees() error {
	withAncestors(sec.dirs)
	sec.first.dirs = index(sec.dirs)
	if len(sec.added) == 0 && len(sec.gone) == 0 {
		return nil
	}
	next := sec.next
	for d := range sec.gone {
		if !sec.dirs[d] {
			return &LoadError{Section: gonePrefix + d + "/", Why: "the first sample has no such directory"}
		}
		next.gone = append(next.gone, d)
	}
	nextSet := map[string]bool{}
	for d := range sec.dirs {
		if !slices.ContainsFunc(next.gone, func(g string) bool { return cgroupfs.Within(d, g) }) {
			nextSet[d] = true
		}
	}
	for d := range sec.added {
		nextSet[d] = true
	}
	for name := range next.data {
		if !sec.dirs[path.Dir(name)] {
			nextSet[path.Dir(name)] = true
		}
	}
	withAncestors(nextSet)
	next.dirs = index(nextSet)
	return nil
}

// addSamples times the first sample by the "taken" header and the second,
// when there is one, by "interval" after it.
func (s *Snapshot) addSamples(first, next *files) error {
	var taken time.Time
	if v, ok := s.Header["taken"]; ok {
		var err error
		if taken, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return &LoadError{Why: fmt.Sprintf("header taken: %q is not an RFC 3339 time", clip(v))}
		}
	}
	s.Samples = []cgroupfs.Sample{{FS: first, Time: taken}}
	if len(next.data) == 0 && next.dirs == nil && len(next.fails) == 0 {
		return nil
	}
	iv, ok := s.Header["interval"]
	if !ok {
		return &LoadError{Why: "a second sample needs an \"interval\" header"}
	}
	d, err := time.ParseDuration(iv)
	if err != nil || d <= 0 || d > 24*time.Hour {
		return &LoadError{Why: fmt.Sprintf("interval %q is not a duration between 0 and 24h", clip(iv))}
	}
	s.Samples = append(s.Samples, cgroupfs.Sample{FS: next, Time: taken.Add(d)})
	return nil
}

// checkSeal verifies a snapshot's closing section, when it has one: it
// must be the last section, count the sections before it, and hold the
// SHA-256 of every byte before its marker line. It reports whether the
// snapshot is sealed.
func checkSeal(raw []byte, ar *txtar.Archive) (bool, error) {
	at := -1
	for i, f := range ar.Files {
		if f.Name == endSection {
			if at >= 0 {
				return false, &LoadError{Section: endSection, Why: "appears twice"}
			}
			at = i
		}
	}
	if at < 0 {
		return false, nil
	}
	if at != len(ar.Files)-1 {
		return false, &LoadError{Section: endSection, Why: "is not the last section: something was appended after the end"}
	}
	marker := []byte("-- " + endSection + " --\n")
	cut := bytes.LastIndex(raw, append([]byte("\n"), marker...))
	if cut < 0 {
		return false, &LoadError{Section: endSection, Why: "its marker line is malformed"}
	}
	body := raw[:cut+1]
	fields := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(ar.Files[at].Data)), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return false, &LoadError{Section: endSection, Why: fmt.Sprintf("line %q is not \"key: value\"", clip(l))}
		}
		fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	n, err := strconv.Atoi(fields["sections"])
	if err != nil {
		return false, &LoadError{Section: endSection, Why: fmt.Sprintf("sections %q is not a count", clip(fields["sections"]))}
	}
	if n != at {
		return false, &LoadError{Section: endSection, Why: fmt.Sprintf("the file is damaged: it holds %d sections where its end says %d", at, n)}
	}
	sum := sha256.Sum256(body)
	if want := fields[sealSHA256]; want != hex.EncodeToString(sum[:]) {
		return false, &LoadError{Section: endSection, Why: fmt.Sprintf("the file was changed after it was written: its SHA-256 is %s where its end says %q", hex.EncodeToString(sum[:]), clip(want))}
	}
	return true, nil
}

// lastSection names the last section of ar, for an error message.
func lastSection(ar *txtar.Archive) string {
	if len(ar.Files) == 0 {
		return "none: there is only the header"
	}
	return strconv.Quote(clip(ar.Files[len(ar.Files)-1].Name))
}

// Seal appends the closing section to a snapshot's text: the count of
// its sections and the SHA-256 of all of it. The text must have a
// "seal: sha256" header line and no closing section yet.
func Seal(body []byte) []byte {
	n := len(txtar.Parse(body).Files)
	sum := sha256.Sum256(body)
	out := slices.Clip(body)
	return fmt.Appendf(out, "-- %s --\nsections: %d\n%s: %s\n", endSection, n, sealSHA256, hex.EncodeToString(sum[:]))
}

// Reseal rewrites an unsealed snapshot's text (one written before sealing
// existed, or edited by hand on purpose, e.g. a generated example) as a
// sealed one: a "seal" header line after the first line, and the closing
// section. A sealed text loses its old closing section first.
func Reseal(raw []byte) ([]byte, error) {
	ar := txtar.Parse(raw)
	if n := len(ar.Files); n > 0 && ar.Files[n-1].Name == endSection {
		ar.Files = ar.Files[:n-1]
	}
	lines := strings.SplitAfter(string(ar.Comment), "\n")
	if strings.TrimSpace(lines[0]) != magicHeader {
		return nil, &LoadError{Why: fmt.Sprintf("not a cgwarden snapshot (the first line must be %q)", magicHeader)}
	}
	var hdr strings.Builder
	hdr.WriteString(lines[0])
	fmt.Fprintf(&hdr, "%s: %s\n", sealHeader, sealSHA256)
	for _, l := range lines[1:] {
		if k, _, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == sealHeader {
			continue
		}
		hdr.WriteString(l)
	}
	ar.Comment = []byte(hdr.String())
	sealed := Seal(txtar.Format(ar))
	if _, err := parse(sealed); err != nil {
		return nil, err
	}
	return sealed, nil
}

// withAncestors adds every ancestor of every directory of set.
func withAncestors(set map[string]bool) {
	for d := range set {
		for d != "/" {
			d = path.Dir(d)
			set[d] = true
		}
	}
}

// index maps each directory of set to its sorted child directories.
func index(set map[string]bool) map[string][]string {
	idx := make(map[string][]string, len(set))
	for d := range set {
		if _, ok := idx[d]; !ok {
			idx[d] = nil
		}
		if d == "/" {
			continue
		}
		parent := path.Dir(d)
		idx[parent] = append(idx[parent], path.Base(d))
	}
	for _, kids := range idx {
		slices.Sort(kids)
	}
	return idx
}

func checkName(name string) error {
	switch {
	case len(name) > MaxPathLen:
		return fmt.Errorf("path longer than %d bytes", MaxPathLen)
	case !strings.HasPrefix(name, "/"):
		return errors.New("path is not absolute")
	case strings.ContainsRune(name, 0):
		return errors.New("path holds a NUL byte")
	}
	for _, part := range strings.Split(strings.TrimSuffix(name, "/"), "/")[1:] {
		if part == "" || part == "." || part == ".." {
			return errors.New("path is not clean (empty, . or .. element)")
		}
	}
	return nil
}

func allowed(name string, points []string) bool {
	under := func(p string) bool { return cgroupfs.Within(name, p) }
	return slices.ContainsFunc(points, under) || slices.ContainsFunc(fixedPrefixes, under)
}

func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// Recorder wraps a live FS and remembers every file read and directory
// listed, so that a snapshot holds exactly what cgwarden read.
type Recorder struct {
	FS    cgroupfs.FS
	mu    sync.Mutex
	data  map[string][]byte
	dirs  map[string]bool
	fails map[string]string // files that exist but could not be read
}

var _ cgroupfs.FS = (*Recorder)(nil)

// NewRecorder wraps fsys.
func NewRecorder(fsys cgroupfs.FS) *Recorder {
	return &Recorder{FS: fsys, data: map[string][]byte{}, dirs: map[string]bool{}, fails: map[string]string{}}
}

func (r *Recorder) ReadFile(p string) ([]byte, error) {
	b, err := r.FS.ReadFile(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		r.data[p] = slices.Clone(b)
		delete(r.fails, p)
	case !errors.Is(err, fs.ErrNotExist):
		// The file is there but unreadable (EACCES, EIO): remember why,
		// so the replay fails where the node did instead of calling the
		// file missing.
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = pe.Err.Error()
		}
		r.fails[p] = clip(strings.ReplaceAll(msg, "\n", " "))
	}
	return b, err
}

func (r *Recorder) ReadDirs(p string) ([]string, error) {
	names, err := r.FS.ReadDirs(p)
	if err == nil {
		r.mu.Lock()
		r.dirs[p] = true
		r.mu.Unlock()
	}
	return names, err
}

// Write writes a snapshot of what first (and, if not nil, second,
// recorded interval later) read. Header lines are written in the order
// given; notes become "# " lines.
func Write(w io.Writer, first, second *Recorder, taken time.Time, interval time.Duration, notes []string) error {
	var hdr strings.Builder
	hdr.WriteString(magicHeader + "\n")
	fmt.Fprintf(&hdr, "%s: %s\n", sealHeader, sealSHA256)
	fmt.Fprintf(&hdr, "taken: %s\n", taken.UTC().Format(time.RFC3339Nano))
	if second != nil {
		fmt.Fprintf(&hdr, "interval: %s\n", interval)
	}
	for _, n := range notes {
		fmt.Fprintf(&hdr, "# %s\n", strings.ReplaceAll(n, "\n", " "))
	}
	ar := &txtar.Archive{Comment: []byte(hdr.String())}
	hasFile := map[string]bool{}
	for _, p := range slices.Sorted(maps.Keys(first.data)) {
		data := first.data[p]
		if p == mountinfo {
			data = cgroupLines(data)
		}
		if err := safeData(p, data); err != nil {
			return err
		}
		ar.Files = append(ar.Files, txtar.File{Name: p, Data: data})
		for d := path.Dir(p); d != "/" && !hasFile[d]; d = path.Dir(d) {
			hasFile[d] = true
		}
	}
	for _, d := range slices.Sorted(maps.Keys(first.dirs)) {
		if !hasFile[d] {
			ar.Files = append(ar.Files, txtar.File{Name: strings.TrimSuffix(d, "/") + "/"})
		}
	}
	for _, p := range slices.Sorted(maps.Keys(first.fails)) {
		if _, ok := first.data[p]; !ok {
			ar.Files = append(ar.Files, txtar.File{Name: failedPrefix + p, Data: []byte(first.fails[p] + "\n")})
		}
	}
	if second != nil {
		for _, p := range slices.Sorted(maps.Keys(second.fails)) {
			if first.fails[p] != second.fails[p] {
				ar.Files = append(ar.Files, txtar.File{Name: nextFailedPrefix + p, Data: []byte(second.fails[p] + "\n")})
			}
		}
		// Cgroups removed or made between the two samples: the
		// directories each sample listed.
		for _, d := range slices.Sorted(maps.Keys(first.dirs)) {
			if !second.dirs[d] && !firstGoneAbove(d, first.dirs, second.dirs) {
				ar.Files = append(ar.Files, txtar.File{Name: gonePrefix + strings.TrimSuffix(d, "/") + "/"})
			}
		}
		for _, d := range slices.Sorted(maps.Keys(second.dirs)) {
			if !first.dirs[d] {
				ar.Files = append(ar.Files, txtar.File{Name: nextPrefix + strings.TrimSuffix(d, "/") + "/"})
			}
		}
		for _, p := range slices.Sorted(maps.Keys(second.data)) {
			if old, ok := first.data[p]; ok && bytes.Equal(old, second.data[p]) {
				continue
			}
			if err := safeData(p, second.data[p]); err != nil {
				return err
			}
			ar.Files = append(ar.Files, txtar.File{Name: nextPrefix + p, Data: second.data[p]})
		}
	}
	_, err := w.Write(Seal(txtar.Format(ar)))
	return err
}

// firstGoneAbove reports whether an ancestor of d is itself removed in the
// second sample, so that one next-gone: section covers the whole subtree.
func firstGoneAbove(d string, first, second map[string]bool) bool {
	for p := path.Dir(d); p != "/" && p != "."; p = path.Dir(p) {
		if first[p] && !second[p] {
			return true
		}
	}
	return false
}

// safeData refuses content that would break the txtar framing.
func safeData(p string, data []byte) error {
	if bytes.Contains(data, []byte("\n-- ")) || bytes.HasPrefix(data, []byte("-- ")) {
		return fmt.Errorf("snapshot: %s holds a line starting with \"-- \", which the format cannot carry", p)
	}
	return nil
}

// cgroupLines keeps only the cgroup mounts of a mountinfo file: the rest
// of a node's mounts are not cgwarden's business and may be private.
func cgroupLines(mi []byte) []byte {
	var out bytes.Buffer
	for _, l := range strings.SplitAfter(string(mi), "\n") {
		if strings.Contains(l, " - cgroup ") || strings.Contains(l, " - cgroup2 ") {
			out.WriteString(l)
		}
	}
	return out.Bytes()
}
