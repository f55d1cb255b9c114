package inspect

import (
	"strings"
	"testing"
)

func TestMiddle(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"kubepods-burstable-pod79c5176e2321b3741f55aee0036af2a9.slice", 24, "kubepods-bur…af2a9.slice"},
		{"short.slice", 24, "short.slice"},
		{"abcdef", 5, "ab…ef"},
		{"abcdef", 2, "abcdef"}, // too narrow to cut sensibly
		{"├─ é…xyz", 5, "├─…yz"},
	} {
		got := Middle(c.in, c.n)
		if got != c.want {
			t.Errorf("Middle(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
		if c.n >= 3 && runes(got) > c.n {
			t.Errorf("Middle(%q, %d) = %q is longer than %d", c.in, c.n, got, c.n)
		}
	}
}

// The table fits the width when its names can be cut; numbers are
// aligned right; no line ends in spaces, even with an empty last cell.
func TestWriteTableFits(t *testing.T) {
	cols := []column{{head: "CGROUP"}, {head: "POD"}, {head: "USED", unit: "cores", right: true}, {head: "NOTE"}}
	first := []cell{
		{name: "/"},
		{tree: "├─ ", name: "kubepods-burstable-pod79c5176e2321b3741f55aee0036af2a9.slice"},
		{tree: "│  └─ ", fixed: "‼ MISPLACED abc at ", name: "/system.slice/containerd.service/kubepods-pod99afd520.slice:cri-containerd:c339025b3f0d"},
	}
	rows := [][]string{{"", "1.000", ""}, {"default/web", "0.020", "x"}, {"default/web", "12.500", ""}}
	var b strings.Builder
	if err := writeTable(&b, cols, first, rows, true, 80); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines, want header, units and 3 rows:\n%s", len(lines), b.String())
	}
	for _, l := range lines {
		if runes(l) > 80 {
			t.Errorf("line of %d > 80 columns: %q", runes(l), l)
		}
		if strings.TrimRight(l, " ") != l {
			t.Errorf("trailing spaces: %q", l)
		}
	}
	if !strings.Contains(lines[3], "kubepods-") || !strings.Contains(lines[3], "…") || !strings.Contains(lines[4], "‼ MISPLACED abc at ") {
		t.Errorf("names not cut in the middle, or a marker cut:\n%s", b.String())
	}
	// Right-aligned: the decimal points of USED line up.
	at := func(l, s string) int { return runes(l[:strings.Index(l, s)]) }
	if at(lines[2], "1.000") != at(lines[4], "12.500")+1 {
		t.Errorf("USED not aligned right:\n%s", b.String())
	}

	// No width: nothing is cut.
	b.Reset()
	if err := writeTable(&b, cols, first, rows, false, 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), first[2].name) || strings.Contains(b.String(), "CGROUP") {
		t.Errorf("without a width or headers:\n%s", b.String())
	}
}
