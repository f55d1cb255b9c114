package inventory_test

import (
	"testing"

	"github.com/cgwarden/cgwarden/internal/inventory"
)

func TestParseSchedstat(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"1000 250 7\n", 1250, true},
		{"0 0 0", 0, true},
		{"18446744073709551615 1 3", 0, false}, // overflows
		{"1 2", 0, false},
		{"a b c", 0, false},
		{"1 2 3 4", 0, false},
		{"", 0, false},
	} {
		got, err := inventory.ParseSchedstat(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseSchedstat(%q) = %d, %v; want %d, ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestParseProcState(t *testing.T) {
	for _, c := range []struct {
		in   string
		want byte
		ok   bool
	}{
		{"4127 (spin) R 1 4127 4127 0 -1", 'R', true},
		{"12 (a) b) c) S 1 2", 'S', true}, // a command may hold ") "
		{"7 (qemu-system-x86) D 1", 'D', true},
		{"7 (x)", 0, false},
		{"no parens", 0, false},
	} {
		got, err := inventory.ParseProcState(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseProcState(%q) = %q, %v; want %q, ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func FuzzParseSchedstat(f *testing.F) {
	for _, s := range []string{"1000 250 7\n", "0 0 0", "1 2", "-1 2 3", "18446744073709551615 1 3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := inventory.ParseSchedstat(s)
		if err != nil && v != 0 {
			t.Fatalf("error %v with value %d", err, v)
		}
		_, _ = inventory.ParseProcState(s)
	})
}
