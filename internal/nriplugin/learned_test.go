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

func TestParseHandlers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "# learned\nspin\n\n  slight  \nspin\n", want: []string{"spin", "slight"}},
		{in: "", want: nil},
		{in: "spin\nWasm_Time\n", err: "line 2"},
		{in: "a b\n", err: "not a DNS label"},
		{in: strings.Repeat("a", 64) + "\n", err: "not a DNS label"},
	} {
		got, err := ParseHandlers(strings.NewReader(c.in))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseHandlers(%q) = %v, %v; want error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseHandlers(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// FuzzParseHandlers: whatever the file holds, every handler returned is a
// valid one, once.
func FuzzParseHandlers(f *testing.F) {
	for _, s := range []string{"spin\n", "# x\n\nspin\nslight\n", "a--b\n", "\x00\n", "Spin"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseHandlers(strings.NewReader(in))
		if err != nil {
			return
		}
		for i, h := range got {
			if ValidHandler(h) != nil || slices.Contains(got[:i], h) {
				t.Fatalf("ParseHandlers(%q) = %v: %q invalid or repeated", in, got, h)
			}
		}
	})
}

func TestLearnWritesWholeFilesAndHandlersFollow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, LearnedFile)
	var errs []error
	h := NewHandlers([]string{"spin"}, path, func(err error) { errs = append(errs, err) })
	if !h.Listed("spin") || h.Listed("slight") {
		t.Fatal("before anything was learned: want spin (configured) only")
	}
	for _, name := range []string{"slight", "slight", "wasmedge"} {
		if err := Learn(path, name); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseHandlers(strings.NewReader(string(b)))
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
	if err := Learn(path, "Bad Name"); err == nil {
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
