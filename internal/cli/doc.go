// Package cli holds cgwarden's cobra commands. Each command parses its
// flags, opens a node (the live host or a snapshot) through Source, and
// hands off to the package that does the work; no logic lives here.
package cli
