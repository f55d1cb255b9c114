// Command testsum summarises a `go test -json` stream for scripts/test's
// lanes:
//
//	go test -count=1 -json ./... 2>&1 | testsum -name "host lane" -log host.log
//
// It writes the tests' plain text (what `go test -v` would have printed) to
// the log, shows the package result lines, "--- FAIL" lines, panics and
// build errors as they come, and at the end the failures: for each failed
// top-level test the first line of each of its last 40 t.Log and t.Error
// messages (what they dump after the first line stays in the log), then
// the lines after each panic. Last comes the lane's count line,
//
//	NAME: n passed, n failed, n skipped
//
// counting tests and subtests. A test still running when its package ended
// (a timeout, os.Exit, a crash) counts as failed. It exits 1 when nothing
// passed, or when a test, a package or a build failed, or a line of the
// stream was not JSON (build errors under GODEBUG=gotestjsonbuildtext=1; the
// go command's "go: downloading" lines are only shown).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

var (
	// shown: the lines scripts/test showed of `go test -v` as they came.
	shown = regexp.MustCompile(`^(ok|FAIL|\?|panic:)|^\s*--- FAIL`)
	// message: the first line of a t.Log or t.Error message.
	message = regexp.MustCompile(`^ +[^ ]+_test\.go:[0-9]+: `)
	// benign: lines of the go command that are not JSON and not a failure.
	benign = regexp.MustCompile(`^(go: downloading |\s*$)`)
)

const (
	messagesKept = 40  // the last messages shown of each failed test
	messageChars = 600 // each cut to this many characters
	panicLines   = 30  // lines shown after a "panic:" line
	failureLines = 400 // at most this many lines of failures
)

// event is one line of the stream (cmd/test2json's fields, less Time and
// Elapsed; build-output and build-fail events have no Package).
type event struct {
	Action, Package, Test, Output string
}

// test names a test (or subtest) of a package.
type test struct{ pkg, name string }

// summary is what the stream has told so far.
type summary struct {
	out, log         io.Writer
	pass, fail, skip int
	broken           bool              // a package, a build or the stream failed
	running          map[test]bool     // packages (name "") and tests started, with no result yet
	failed           []test            // failed top-level tests, in order
	unfinished       map[test]bool     // ... of which these never ended
	pkgFailed        []string          // packages failed with no failed test
	messages         map[test][]string // each top-level test's last messages
	panics           []string          // the lines of each panic
	panicPkg         string            // the package a panic is being read from
	panicLeft        int               // lines of it still to read
}

func main() {
	name := flag.String("name", "tests", "the lane's name, for the count line")
	logPath := flag.String("log", "", "write the tests' plain text output to this `file`")
	flag.Parse()
	log := io.Discard
	if *logPath != "" {
		f, err := os.Create(*logPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testsum:", err)
			os.Exit(2)
		}
		log = f
	}
	status := run(os.Stdin, os.Stdout, os.Stderr, log, *name)
	if c, ok := log.(io.Closer); ok {
		if err := c.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "testsum:", err)
			status = 2
		}
	}
	os.Exit(status)
}

// run reads the stream from r to its end and returns the exit status.
func run(r io.Reader, out, errOut, log io.Writer, name string) int {
	s := &summary{out: out, log: log, running: map[test]bool{}, unfinished: map[test]bool{}, messages: map[test][]string{}}
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			s.line(line)
		}
		if err != nil {
			if err != io.EOF {
				fmt.Fprintln(errOut, "testsum:", err)
				s.broken = true
			}
			break
		}
	}
	s.ended("") // tests and packages the stream left unfinished
	return s.report(errOut, name)
}

// line takes one line of the stream.
func (s *summary) line(line string) {
	var e event
	if err := json.Unmarshal([]byte(line), &e); err != nil || e.Action == "" {
		fmt.Fprint(s.log, line)
		fmt.Fprintln(s.out, strings.TrimSuffix(line, "\n"))
		s.broken = s.broken || !benign.MatchString(line)
		return
	}
	top := test{e.Package, strings.SplitN(e.Test, "/", 2)[0]}
	t := test{e.Package, e.Test}
	switch e.Action {
	case "output", "build-output":
		fmt.Fprint(s.log, e.Output)
		text := strings.TrimSuffix(e.Output, "\n")
		if e.Action == "build-output" || shown.MatchString(text) {
			fmt.Fprintln(s.out, text)
		}
		if e.Test != "" && message.MatchString(text) {
			msg := text
			if len([]rune(msg)) > messageChars {
				msg = string([]rune(msg)[:messageChars])
			}
			m := append(s.messages[top], msg)
			s.messages[top] = m[max(0, len(m)-messagesKept):]
		}
		s.readPanic(e.Package, text)
	case "start":
		s.running[test{e.Package, ""}] = true
	case "run":
		s.running[t] = true
	case "build-fail":
		s.broken = true
	case "pass", "skip", "fail":
		delete(s.running, t)
		if e.Test == "" {
			s.ended(e.Package)
			if e.Action == "fail" && !slices.ContainsFunc(s.failed, func(t test) bool { return t.pkg == e.Package }) {
				s.pkgFailed = append(s.pkgFailed, e.Package)
			}
			s.broken = s.broken || e.Action == "fail"
		} else if e.Action == "pass" {
			s.pass++
		} else if e.Action == "skip" {
			s.skip++
		} else {
			s.failTest(top)
		}
	}
}

// readPanic keeps a "panic:" line of pkg and the lines after it.
func (s *summary) readPanic(pkg, text string) {
	if strings.HasPrefix(text, "panic:") {
		s.panicPkg, s.panicLeft = pkg, panicLines+1
	}
	if s.panicLeft > 0 && pkg == s.panicPkg {
		s.panics = append(s.panics, text)
		s.panicLeft--
	}
}

// ended fails the tests of pkg (of every package when pkg is "") that were
// still running when it ended.
func (s *summary) ended(pkg string) {
	var left []test
	for t := range s.running {
		if pkg == "" || t.pkg == pkg {
			left = append(left, t)
		}
	}
	slices.SortFunc(left, func(a, b test) int { return strings.Compare(a.pkg+" "+a.name, b.pkg+" "+b.name) })
	for _, t := range left {
		delete(s.running, t)
		if t.name == "" { // a package the stream cut short
			fmt.Fprintf(s.out, "FAIL\t%s [no result: the stream ended]\n", t.pkg)
			s.broken = true
			continue
		}
		top := test{t.pkg, strings.SplitN(t.name, "/", 2)[0]}
		s.unfinished[top] = true
		s.failTest(top)
	}
}

// failTest counts a failed test or subtest of the top-level test top.
func (s *summary) failTest(top test) {
	s.fail++
	if !slices.Contains(s.failed, top) {
		s.failed = append(s.failed, top)
	}
}

// report prints the failures and the count line, and returns the status.
func (s *summary) report(errOut io.Writer, name string) int {
	failed := s.broken || s.fail > 0
	if failed {
		var lines []string
		for _, t := range s.failed {
			note := ""
			if s.unfinished[t] {
				note = " (did not finish)"
			}
			lines = append(lines, "-- "+t.name+note+":")
			lines = append(lines, s.messages[t]...)
		}
		for _, p := range s.pkgFailed {
			lines = append(lines, "-- package "+p+" failed, but none of its tests (the log has its output)")
		}
		lines = append(lines, s.panics...)
		fmt.Fprintf(s.out, "-- %s failures:\n", name)
		for i, l := range lines {
			if i == failureLines {
				fmt.Fprintf(s.out, "... %d more lines of failures (the log has them all)\n", len(lines)-i)
				break
			}
			fmt.Fprintln(s.out, l)
		}
	}
	fmt.Fprintf(s.out, "%s: %d passed, %d failed, %d skipped\n", name, s.pass, s.fail, s.skip)
	if s.pass == 0 {
		fmt.Fprintf(errOut, "%s: no test passed\n", name)
		return 1
	}
	if failed {
		return 1
	}
	return 0
}
