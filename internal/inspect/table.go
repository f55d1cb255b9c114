package inspect

import (
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// column is one column of a table: its header and whether its cells
// (numbers) are aligned right.
type column struct {
	head, unit string
	right      bool
}

// cell is the first column's content: a tree drawing that is never cut,
// a fixed part (a marker) and a name that may be shortened in the middle
// when the table is wider than the terminal.
type cell struct {
	tree, fixed, name string
}

func (c cell) String() string { return c.tree + c.fixed + c.name }

// minName is the fewest characters a shortened cgroup name keeps.
const minName = 24

// minPod is the fewest characters a shortened namespace/name keeps: the
// names people look for, cut only when the cgroup names could not make
// the room.
const minPod = 40

// writeTable writes rows under cols, two spaces apart, with no trailing
// spaces. When width > 0 and the table is wider, it is fitted (see fit).
func writeTable(w io.Writer, cols []column, first []cell, rows [][]string, headers bool, width int) error {
	widths := measure(cols, first, rows, headers)
	if width > 0 {
		first, rows, widths = fit(cols, first, rows, widths, headers, width)
	}
	var b strings.Builder
	line := func(cells []string) {
		var l strings.Builder
		for i, v := range cells {
			if i > 0 {
				l.WriteString("  ")
			}
			pad := strings.Repeat(" ", max(widths[i]-runes(v), 0))
			if cols[i].right {
				l.WriteString(pad + v)
			} else {
				l.WriteString(v + pad)
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " ") + "\n")
	}
	if headers {
		// The units go on a line of their own under the names, so that
		// they widen no column.
		heads, units := make([]string, len(cols)), make([]string, len(cols))
		hasUnits := false
		for i, c := range cols {
			heads[i], units[i] = c.head, c.unit
			hasUnits = hasUnits || c.unit != ""
		}
		line(heads)
		if hasUnits {
			line(units)
		}
	}
	for i, r := range rows {
		line(append([]string{first[i].String()}, r...))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// measure returns the width of each column: its widest cell, and its
// header and unit when they are written.
func measure(cols []column, first []cell, rows [][]string, headers bool) []int {
	widths := make([]int, len(cols))
	if headers {
		for i, c := range cols {
			widths[i] = max(runes(c.head), runes(c.unit))
		}
	}
	for _, c := range first {
		widths[0] = max(widths[0], runes(c.String()))
	}
	for _, r := range rows {
		for i, v := range r {
			widths[i+1] = max(widths[i+1], runes(v))
		}
	}
	return widths
}

// fit makes a table wider than width narrower: first the names of the
// first column are cut in the middle (to minName characters, half that
// after a marker), then, when that was not enough, the POD column (to
// minPod). Tree drawings, markers and figures are never cut, so a table
// with many columns can stay wider than a narrow terminal.
func fit(cols []column, first []cell, rows [][]string, widths []int, headers bool, width int) ([]cell, [][]string, []int) {
	total := 2 * (len(cols) - 1)
	for _, v := range widths {
		total += v
	}
	over := total - width
	if over <= 0 {
		return first, rows, widths
	}
	widths = slices.Clone(widths)
	budget := widths[0] - over
	total -= widths[0]
	first = slices.Clone(first)
	widths[0] = 0
	if headers {
		widths[0] = runes(cols[0].head)
	}
	for i, c := range first {
		least := minName
		if c.fixed != "" {
			least = minName / 2 // the marker already says what it is
		}
		first[i].name = Middle(c.name, max(budget-runes(c.tree)-runes(c.fixed), least))
		widths[0] = max(widths[0], runes(first[i].String()))
	}
	if over = total + widths[0] - width; over > 0 && len(cols) > 2 {
		keep := max(widths[2]-over, minPod)
		rows = shortenColumn(rows, 1, keep)
		widths[2] = min(widths[2], max(keep, runes(cols[2].head)))
	}
	return first, rows, widths
}

func runes(s string) int { return utf8.RuneCountInString(s) }

// Middle shortens s to n characters by cutting its middle out and putting
// "…" there: a cgroup name's start (its kind) and end (its ID and
// suffix) say more than its middle.
func Middle(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 3 {
		return s
	}
	tail := (n - 1) / 2
	head := n - 1 - tail
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

// shortenColumn returns rows with the cells of column i cut to n
// characters in the middle.
func shortenColumn(rows [][]string, i, n int) [][]string {
	out := make([][]string, len(rows))
	for j, r := range rows {
		out[j] = append([]string(nil), r...)
		out[j][i] = Middle(r[i], n)
	}
	return out
}
