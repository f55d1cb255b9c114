package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"
)

// progress counts a wait down on one line of stderr, when stderr is a
// terminal: a scan that waits 5 s for its second sample says so instead
// of looking hung. On a pipe or a file it writes nothing.
type progress struct {
	w    io.Writer // nil: not a terminal
	what string
}

// progress returns the counter for a wait to do what.
func (o *Options) progress(what string) *progress {
	p := &progress{what: what}
	if isTerminal(o.stderr) {
		p.w = o.stderr
	}
	return p
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// wait sleeps d, showing the time left each second, then clears the line.
func (p *progress) wait(d time.Duration) {
	p.sleep(d, d)
	p.done()
}

// step sleeps the i-th of n equal parts of total, showing the time left.
func (p *progress) step(total time.Duration, i, n int) {
	p.sleep(total/time.Duration(n), total-time.Duration(i)*total/time.Duration(n))
}

// sleep sleeps d with left of the wait to go at its start.
func (p *progress) sleep(d, left time.Duration) {
	end := time.Now().Add(d)
	for {
		now := time.Now()
		if !now.Before(end) {
			return
		}
		p.show(left - d + end.Sub(now))
		time.Sleep(min(end.Sub(now), time.Second))
	}
}

// show writes the line with left to go.
func (p *progress) show(left time.Duration) {
	if p.w == nil {
		return
	}
	fmt.Fprintf(p.w, "\r\x1b[Kcgwarden: %s, %s left…", p.what, (left + time.Second - 1).Truncate(time.Second))
}

// done clears the line.
func (p *progress) done() {
	if p.w != nil {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}
