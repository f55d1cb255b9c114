package nriplugin

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// parseHandlers reads a handlers file with ParseLearned and returns its
// handlers, whatever their times.
func parseHandlers(in string) ([]string, error) {
	ls, err := ParseLearned(strings.NewReader(in))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range ls {
		out = append(out, l.Handler)
	}
	return out, nil
}

func TestParseHandlers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "# learned\nspin\n\n  slight  \nspin\n", want: []string{"spin", "slight"}},
		{in: "", want: nil},
		{in: "spin\nWasm_Time\n", err: "line 2"},
		{in: "a b c\n", err: "want a handler and a time"},
		{in: "spin yesterday\n", err: "not an RFC 3339 time"},
		{in: "spin 2026-12-01T10:00:00Z\nspin\n", want: []string{"spin"}},
		{in: strings.Repeat("a", 64) + "\n", err: "not a DNS label"},
	} {
		got, err := parseHandlers(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseLearned(%q) = %v, %v; want error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseLearned(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// FuzzParseHandlers: whatever the file holds, every handler returned is a
// valid one, once.
func FuzzParseHandlers(f *testing.F) {
	for _, s := range []string{"spin\n", "# x\n\nspin\nslight\n", "a--b\n", "\x00\n", "Spin", "spin 2026-12-01T10:00:00Z\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parseHandlers(in)
		if err != nil {
			return
		}
		for i, h := range got {
			if ValidHandler(h) != nil || slices.Contains(got[:i], h) {
				t.Fatalf("ParseLearned(%q) = %v: %q invalid or repeated", in, got, h)
			}
		}
	})
}

func TestLearnWritesWholeFilesAndHandlersFollow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, LearnedFile)
	var errs []error
	h := NewHandlers([]string{"spin"}, path, func(err error) { errs = append(errs, err) })
	now := time.Now()
	if !h.Listed("spin") || h.Listed("slight") {
		t.Fatal("before anything was learned: want spin (configured) only")
	}
	for _, name := range []string{"slight", "slight", "wasmedge"} {
		if err := Learn(path, name, now); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseHandlers(string(b))
	if err != nil || !slices.Equal(got, []string{"slight", "wasmedge"}) {
		t.Fatalf("file holds %v (%v):\n%s", got, err, b)
	}
	if !h.Listed("slight") || !h.Listed("wasmedge") || h.Listed("runc") {
		t.Error("after learning: want slight and wasmedge listed, runc not")
	}
	// No temporary file is left beside it.
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files in the directory, want 1", len(ents))
	}
	if err := Learn(path, "Bad Name", now); err == nil {
		t.Error("Learn took an invalid handler")
	}
	// A file broken by hand: the last good list stays, and it is said.
	time.Sleep(10 * time.Millisecond) // a new mtime even on coarse clocks
	if err := os.WriteFile(path, []byte("slight\nNOT VALID\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !h.Listed("wasmedge") {
		t.Error("a broken file dropped the last good list")
	}
	if len(errs) == 0 || !strings.Contains(errs[len(errs)-1].Error(), "line 2") {
		t.Errorf("errors %v, want one naming line 2", errs)
	}
	// Removed: nothing learned any more.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if h.Listed("wasmedge") || !h.Listed("spin") {
		t.Error("after the file went: want only the configured handler")
	}
}

func TestHandlersRefuseADirectory(t *testing.T) {
	dir := t.TempDir()
	var got error
	h := NewHandlers(nil, dir, func(err error) { got = err })
	if h.Listed("spin") {
		t.Error("a directory listed a handler")
	}
	var pe *os.PathError
	if got == nil || !errors.As(got, &pe) {
		t.Errorf("error %v, want a path error", got)
	}
}

// TestLearnedHandlersExpire: a handler is listed for LearnedTTL after the
// agent last saw it misplace a container, then forgotten (its next
// container is created where the runtime puts it, and adopted and learned
// again if the runtime still misplaces). Seen again, its time moves on; a
// line without a time (a file from before handlers expired, learned
// without the shape check) is not listed.
func TestLearnedHandlersExpire(t *testing.T) {
	path := filepath.Join(t.TempDir(), LearnedFile)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := t0
	h := NewHandlers(nil, path, nil)
	h.now = func() time.Time { return clock }
	if err := Learn(path, "spin", t0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		at     time.Duration
		listed bool
	}{{0, true}, {LearnedTTL - time.Minute, true}, {LearnedTTL, false}, {2 * LearnedTTL, false}} {
		clock = t0.Add(c.at)
		if got := h.Listed("spin"); got != c.listed {
			t.Errorf("%v after it was learned: listed %v, want %v", c.at, got, c.listed)
		}
	}
	// Seen again after six days: listed for another LearnedTTL from then.
	if err := Learn(path, "spin", t0.Add(6*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	clock = t0.Add(6*24*time.Hour + LearnedTTL - time.Minute)
	if !h.Listed("spin") {
		t.Error("a handler seen again expired from its first time")
	}
	// An expired handler is dropped from the file when another is learned.
	if err := Learn(path, "slight", t0.Add(30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if got, err := parseHandlers(string(b)); err != nil || !slices.Equal(got, []string{"slight"}) {
		t.Errorf("file holds %v (%v), want only slight:\n%s", got, err, b)
	}
	// An old file's bare handler is not listed.
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(path, []byte("spin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	clock = t0
	if h.Listed("spin") {
		t.Error("a handler without a time (learned before the shape check) is listed")
	}
}

func TestLiteralMisplacement(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for dir, want := range map[string]bool{
		"/sys/fs/cgroup/cpu/kubepods-besteffort-pod11111111_2222_3333_4444_555555555555.slice:cri-containerd:" + id: true,
		"/sys/fs/cgroup/kubepods.slice/kubepods-pod11111111_2222_3333_4444_555555555555.slice:cri-containerd:" + id: true,
		"/sys/fs/cgroup/cri-containerd-" + id + ".scope":                                                            false,
		"/sys/fs/cgroup/pod11111111-2222-3333-4444-555555555555/" + id:                                              false,
		"/sys/fs/cgroup/user.slice/user-1000.slice/kubepods-pod1.slice:cri-containerd:" + id:                        true,
	} {
		if got := LiteralMisplacement(dir); got != want {
			t.Errorf("LiteralMisplacement(%s) = %v, want %v", dir, got, want)
		}
	}
}
