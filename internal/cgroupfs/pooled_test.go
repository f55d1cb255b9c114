package cgroupfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// ReadFile and ReadDirs read into pooled buffers. These tests cover what
// that must not change: a listing larger than one getdents64 call, a file
// larger than the pooled buffer, and results that stay intact when the
// buffer is reused.

func TestReadDirsManyEntries(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := range 1500 {
		// Long names so that the listing spans many getdents64 calls.
		name := fmt.Sprintf("kubepods-burstable-pod%08x_0000_4000_8000_%012x.slice", i, i)
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("file-%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	h, err := OpenHost(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	got, err := h.ReadDirs("/")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ReadDirs returned %d names, want %d (first %q)", len(got), len(want), got[:min(3, len(got))])
	}
}

func TestReadFileLargeAndIndependent(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("total_rss 123456789\n", 3000) // 60 KB: grows the pooled buffer
	if err := os.WriteFile(filepath.Join(dir, "big"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "small"), []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := OpenHost(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	b1, err := h.ReadFile("/big")
	if err != nil || string(b1) != big {
		t.Fatalf("big file: %d bytes, %v; want %d bytes", len(b1), err, len(big))
	}
	s1, err := h.ReadFile("/small")
	if err != nil {
		t.Fatal(err)
	}
	// Reading more files reuses the buffer; earlier results must not change.
	for range 10 {
		if _, err := h.ReadFile("/big"); err != nil {
			t.Fatal(err)
		}
	}
	if string(s1) != "2\n" || string(b1) != big {
		t.Fatalf("an earlier result changed when the buffer was reused: small=%q", s1)
	}
	if cap(s1) > 64 {
		t.Errorf("a 2-byte file returned a slice of capacity %d: the pooled buffer leaked out", cap(s1))
	}
	e, err := h.ReadFile("/empty")
	if err != nil || e == nil || len(e) != 0 {
		t.Fatalf("empty file: %q (nil=%v), %v; want an empty, non-nil slice", e, e == nil, err)
	}
	if !bytes.Equal(b1[:10], []byte("total_rss ")) {
		t.Fatal("big file content")
	}
}
