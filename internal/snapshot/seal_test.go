package snapshot_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// sealedFixture writes the two-pod v1 fixture node as a sealed snapshot.
func sealedFixture(t *testing.T) string {
	t.Helper()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 := t0.Add(time.Second)
	r1 := snapshot.NewRecorder(v1Node(func(b uint64) uint64 { return b }))
	r2 := snapshot.NewRecorder(v1Node(func(b uint64) uint64 { return b + b/1000 }))
	scan(t, r1, r2, t0, t1)
	var buf bytes.Buffer
	if err := snapshot.Write(&buf, r1, r2, t0, t1.Sub(t0), nil); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// A snapshot cgwarden writes proves it is whole; one cut short, edited,
// or with sections added after its end is refused with a reason, where
// before it replayed as a smaller node with "No findings".
func TestSeal(t *testing.T) {
	text := sealedFixture(t)
	s, err := snapshot.Load(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Sealed || s.Header["seal"] != "sha256" {
		t.Fatalf("a fresh snapshot is not sealed: %v", s.Header)
	}
	if !strings.HasSuffix(text, "\n") || !strings.Contains(text, "\n-- cgwarden-end --\nsections: ") {
		t.Fatalf("no closing section:\n%s", text[max(0, len(text)-300):])
	}
	// Cut at the start of a section, so that what is left is a valid
	// txtar file: the worst case, every byte well formed.
	half := text[:strings.LastIndex(text[:len(text)/2], "\n-- ")+1]
	oneByte := strings.Replace(text, "cpu.shares --\n2\n", "cpu.shares --\n3\n", 1)
	if oneByte == text {
		t.Fatal("the fixture has no cpu.shares of 2 to edit")
	}
	for name, c := range map[string]struct{ text, want string }{
		"cut in half":          {half, "cut short or was edited"},
		"end section dropped":  {text[:strings.Index(text, "-- cgwarden-end --")], "cut short or was edited"},
		"one value edited":     {oneByte, "changed after it was written"},
		"section appended":     {text + "-- /proc/meminfo --\nMemTotal: 1 kB\n", "not the last section"},
		"end twice":            {text + text[strings.Index(text, "-- cgwarden-end --"):], "appears twice"},
		"count edited":         {strings.Replace(text, "\nsections: ", "\nsections: 1", 1), "holds"},
		"seal line removed":    {strings.Replace(text, "seal: sha256\n", "", 1), "changed after it was written"},
		"unknown seal":         {strings.Replace(text, "seal: sha256\n", "seal: md5\n", 1), "changed after it was written"},
		"checksum not hex":     {text[:strings.LastIndex(text, "sha256: ")] + "sha256: nope\n", "changed after it was written"},
		"end without its keys": {text[:strings.Index(text, "-- cgwarden-end --")] + "-- cgwarden-end --\nwhat\n", "not \"key: value\""},
	} {
		_, err := snapshot.Load(strings.NewReader(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}

// A snapshot written before sealing existed still loads, unsealed (the
// CLI warns); Reseal turns it into a sealed one that replays the same.
func TestUnsealedLoadsAndReseals(t *testing.T) {
	s, err := snapshot.Load(strings.NewReader(minimal))
	if err != nil || s.Sealed {
		t.Fatalf("legacy snapshot: sealed %v, %v", s != nil && s.Sealed, err)
	}
	sealed, err := snapshot.Reseal([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := snapshot.Load(bytes.NewReader(sealed))
	if err != nil || !s2.Sealed {
		t.Fatalf("resealed: %v\n%s", err, sealed)
	}
	if !strings.HasPrefix(string(sealed), "cgwarden snapshot v1\nseal: sha256\ntaken: ") {
		t.Errorf("the seal line is not the second line:\n%s", sealed)
	}
	again, err := snapshot.Reseal(sealed)
	if err != nil || !bytes.Equal(again, sealed) {
		t.Errorf("resealing a sealed snapshot changed it (%v):\n%s", err, again)
	}
	b, err := s2.Samples[0].FS.ReadFile("/sys/fs/cgroup/a/cpu.weight")
	if err != nil || string(b) != "100\n" {
		t.Errorf("cpu.weight after reseal: %q, %v", b, err)
	}
}
