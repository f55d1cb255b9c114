// Package report renders what cgwarden knows about a node — or what a
// demo run measured — as one self-contained HTML file: the node header,
// the audit's findings with evidence and remedies, the pod tree with
// weights, guaranteed and used CPU, and bar charts drawn as inline SVG.
//
// The file loads nothing: styles are inline, charts are SVG in the page,
// there are no scripts and no fonts. Every chart has a <title> and a
// <desc> and is followed by a table of the same figures, so it reads
// without the picture (screen readers, print in black and white). The
// layout narrows to a phone's width without scrolling sideways.
//
// Build turns a scanned node and its audit into a Page; FromDemo does so
// for a demo run; Write lays a Page out with html/template.
package report
