//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// Enabled reports whether this build holds failpoints: it does.
const Enabled = true

// Env names the failpoints to arm; TraceEnv a file every hit is appended
// to.
const (
	Env      = "CGWARDEN_FAILPOINTS"
	TraceEnv = "CGWARDEN_FAILPOINT_TRACE"
)

// armed is the process's failpoints, read from the environment on the
// first hit. Package-level state, which cgwarden otherwise avoids: a
// failpoint is reached from deep inside the code, where nothing can be
// handed down to it, and exists only in test builds.
var armed struct {
	once   sync.Once
	mu     sync.Mutex
	points map[string]*Point
	hits   map[string]int
	trace  *os.File
}

func load() {
	armed.hits = map[string]int{}
	points, err := Parse(os.Getenv(Env))
	if err != nil {
		// A test that arms a point it misspelled must not pass
		// because nothing fired.
		fmt.Fprintf(os.Stderr, "cgwarden failpoint: %v\n", err)
		os.Exit(97)
	}
	armed.points = points
	if name := os.Getenv(TraceEnv); name != "" {
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cgwarden failpoint: %v\n", err)
			os.Exit(97)
		}
		armed.trace = f
	}
}

// Hit counts a hit of point name and, when the point is armed for this
// hit, acts. It reports true only for the skip action.
func Hit(name string) bool {
	armed.once.Do(load)
	armed.mu.Lock()
	armed.hits[name]++
	n := armed.hits[name]
	p := armed.points[name]
	if armed.trace != nil {
		_, _ = armed.trace.WriteString(name + "\n")
	}
	armed.mu.Unlock()
	if p == nil || n != p.At {
		return false
	}
	fmt.Fprintf(os.Stderr, "cgwarden failpoint %s: %s\n", name, p.Action)
	switch p.Action {
	case Panic:
		panic("cgwarden failpoint " + name)
	case Kill:
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	case Stall:
		time.Sleep(p.Stall)
	case Skip:
		return true
	}
	return false
}
