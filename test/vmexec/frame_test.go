package main

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestFrameRoundTrip: frames read back as written, in order, and a stream
// that ends between frames ends with io.EOF.
func TestFrameRoundTrip(t *testing.T) {
	var b bytes.Buffer
	want := []struct {
		kind    byte
		payload string
	}{
		{frameOutput, "=== RUN   TestX\n"},
		{frameOutput, "\x16\x00no newline"}, // test2json's marker and any byte pass as they are
		{frameOutput, ""},
		{frameExit, "3"},
	}
	for _, f := range want {
		if err := writeFrame(&b, f.kind, []byte(f.payload)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range want {
		kind, payload, err := readFrame(&b)
		if err != nil || kind != f.kind || string(payload) != f.payload {
			t.Fatalf("read %q %q %v, want %q %q", kind, payload, err, f.kind, f.payload)
		}
	}
	if _, _, err := readFrame(&b); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

// TestJobRoundTrip: a job goes through its frame whole.
func TestJobRoundTrip(t *testing.T) {
	var b bytes.Buffer
	j := job{Op: "run", Dir: "internal/cgroupfs", Args: []string{"-test.v=test2json", "-test.run", "A B"}, Limit: 150, Size: 1 << 26}
	if err := writeJob(&b, j); err != nil {
		t.Fatal(err)
	}
	got, err := readJob(&b)
	if err != nil || got.Op != j.Op || got.Dir != j.Dir || got.Limit != j.Limit || got.Size != j.Size || len(got.Args) != 3 || got.Args[2] != "A B" {
		t.Fatalf("read %+v %v, want %+v", got, err, j)
	}
	if err := writeExit(&b, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := readJob(&b); err == nil {
		t.Fatal("an exit frame read as a job")
	}
}

// TestReadFrameRejects: a cut frame, an unknown kind and a length over
// maxFrame are errors, never a short payload or a huge allocation.
func TestReadFrameRejects(t *testing.T) {
	for _, c := range []struct {
		name, data string
		want       error // nil: any error
	}{
		{"cut in the header", "o\x00\x00", io.ErrUnexpectedEOF},
		{"cut in the payload", "o\x00\x00\x00\x05abc", io.ErrUnexpectedEOF},
		{"unknown kind", "z\x00\x00\x00\x00", nil},
		{"over maxFrame", "o\x00\x10\x00\x01", nil},
		{"length of 4 GiB", "x\xff\xff\xff\xff", nil},
	} {
		_, _, err := readFrame(bytes.NewReader([]byte(c.data)))
		if err == nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := writeFrame(io.Discard, frameOutput, make([]byte, maxFrame+1)); err == nil {
		t.Error("a frame over maxFrame was written")
	}
}

// TestParseExit: an exit frame holds a status of 0 to 255.
func TestParseExit(t *testing.T) {
	for s, want := range map[string]int{"0": 0, "1": 1, "137": 137, "255": 255} {
		if got, err := parseExit([]byte(s)); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "-1", "256", "0x1", " 1"} {
		if _, err := parseExit([]byte(s)); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}

// FuzzReadFrame: whatever the bytes, readFrame ends in an error without
// panicking, and each frame it does read is exactly the bytes it took.
func FuzzReadFrame(f *testing.F) {
	var b bytes.Buffer
	_ = writeFrame(&b, frameOutput, []byte("ok\n"))
	_ = writeFrame(&b, frameExit, []byte("0"))
	f.Add(b.Bytes())
	f.Add([]byte("j\x00\x00\x00\x02{}"))
	f.Add([]byte("o\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			start := len(data) - r.Len()
			kind, payload, err := readFrame(r)
			if err != nil {
				return
			}
			var again bytes.Buffer
			if err := writeFrame(&again, kind, payload); err != nil {
				t.Fatalf("a frame read cannot be written: %v", err)
			}
			if took := data[start : len(data)-r.Len()]; !bytes.Equal(again.Bytes(), took) {
				t.Fatalf("read %q %q from %q", kind, payload, took)
			}
		}
	})
}
