package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Chart is a horizontal grouped bar chart drawn as inline SVG: one group
// of bars per row (a pod, a phase), one bar per series. The same figures
// are given as a table beside it, the chart's text alternative.
type Chart struct {
	ID, Title, Desc string
	// Unit is "%" or "cores".
	Unit   string
	Series []string
	Groups []Group

	// Laid out by layout: the SVG's size and the shapes in it.
	Width, Height int
	Bars          []Bar
	Labels        []Text
	Legend        []LegendItem
	Axis          []Text
	Ticks         []Line
}

// Group is one row of bars.
type Group struct {
	Label  string
	Values []float64
}

// Bar is one rectangle, with its value written at its end.
type Bar struct {
	X, Y, W, H int
	Color      string
	Value      Text
}

// Text is a label at a point.
type Text struct {
	X, Y   int
	S      string
	Anchor string
}

// Line is a grid line.
type Line struct{ X1, Y1, X2, Y2 int }

// LegendItem is one series' swatch and name.
type LegendItem struct {
	X, Y  int
	Color string
	Name  string
}

// palette: colours with at least 4.5:1 contrast against white, told
// apart by lightness as well as hue (and every bar carries its value
// and series in the table).
var palette = []string{"#1f4e8c", "#b34700", "#2d6a2e", "#6b2f8f"}

// Chart geometry, in SVG user units (the SVG scales to its container:
// narrow enough that its text stays readable at a phone's width).
const (
	chartWidth = 480
	valueRoom  = 70
	labelRoom  = 20
	barHeight  = 16
	barGap     = 3
	groupGap   = 10
	topRoom    = 26
	axisRoom   = 22
	leftPad    = 4
)

// layout computes the shapes of the chart: a legend on top, then per
// group its label on a line of its own and its bars beneath, then the
// axis.
func (c Chart) layout() Chart {
	c.Width = chartWidth
	max := 0.0
	for _, g := range c.Groups {
		for _, v := range g.Values {
			max = math.Max(max, v)
		}
	}
	max = niceMax(max, c.Unit)
	plot := chartWidth - leftPad - valueRoom
	x, row := leftPad, 0
	for i, s := range c.Series {
		w := 22 + 8*len([]rune(s))
		if x+w > chartWidth && x > leftPad {
			x, row = leftPad, row+1
		}
		c.Legend = append(c.Legend, LegendItem{X: x, Y: 4 + row*18, Color: palette[i%len(palette)], Name: s})
		x += w + 10
	}
	y := topRoom + row*18
	for _, g := range c.Groups {
		c.Labels = append(c.Labels, Text{X: leftPad, Y: y + 14, S: truncate(g.Label, 56), Anchor: "start"})
		y += labelRoom
		for i, v := range g.Values {
			w := 0
			if max > 0 {
				w = int(math.Round(v / max * float64(plot)))
			}
			b := Bar{X: leftPad, Y: y, W: w, H: barHeight, Color: palette[i%len(palette)]}
			b.Value = Text{X: leftPad + w + 4, Y: y + barHeight - 3, S: format(v, c.Unit), Anchor: "start"}
			c.Bars = append(c.Bars, b)
			y += barHeight + barGap
		}
		y += groupGap - barGap
	}
	top := topRoom + row*18
	for i := 0; i <= 4; i++ {
		x := leftPad + i*plot/4
		c.Ticks = append(c.Ticks, Line{X1: x, Y1: top, X2: x, Y2: y})
		anchor := "middle"
		if i == 0 {
			anchor = "start"
		}
		c.Axis = append(c.Axis, Text{X: x, Y: y + 16, S: format(max*float64(i)/4, c.Unit), Anchor: anchor})
	}
	c.Height = y + axisRoom
	return c
}

// niceMax rounds the axis up: 100 for percentages that fit, else a
// round number of cores.
func niceMax(v float64, unit string) float64 {
	if unit == "%" && v <= 100 {
		return 100
	}
	if v <= 0 {
		return 1
	}
	for _, m := range []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 4, 5, 8, 10, 16, 20, 32, 50, 64, 100, 128, 256, 512, 1024} {
		if v <= m {
			return m
		}
	}
	return math.Ceil(v)
}

func format(v float64, unit string) string {
	if unit == "%" {
		return strconv.FormatFloat(v, 'f', 1, 64) + "%"
	}
	switch {
	case v == 0:
		return "0"
	case v < 0.01:
		return strconv.FormatFloat(v, 'f', 4, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// Summary is the chart's figures in one sentence, for its <desc>.
func (c Chart) Summary() string {
	var parts []string
	for _, g := range c.Groups {
		var vs []string
		for i, v := range g.Values {
			vs = append(vs, fmt.Sprintf("%s %s", c.Series[i], format(v, c.Unit)))
		}
		parts = append(parts, g.Label+": "+strings.Join(vs, ", "))
	}
	return strings.Join(parts, "; ") + "."
}

// Cells is a group's values formatted for the table.
func (c Chart) Cells(g Group) []string {
	var out []string
	for _, v := range g.Values {
		out = append(out, format(v, c.Unit))
	}
	return out
}
