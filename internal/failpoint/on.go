//go:build failpoints

package failpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Enabled reports whether this build holds failpoints: it does.
const Enabled = true

// Env names the failpoints to arm; TraceEnv a file every hit is appended
// to; FileEnv a file holding more failpoints to arm, in Env's form, which
// the process that reads it removes: an armed file fires in one process
// only, so that a test can arm the next start of a container (the cluster
// lane's fault suite) and the start after it runs clean, whatever the
// container's restart policy.
const (
	Env      = "CGWARDEN_FAILPOINTS"
	TraceEnv = "CGWARDEN_FAILPOINT_TRACE"
	FileEnv  = "CGWARDEN_FAILPOINTS_FILE"
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
	spec := os.Getenv(Env)
	if name := os.Getenv(FileEnv); name != "" {
		b, err := os.ReadFile(name)
		switch {
		case err == nil:
			// Consumed: a process that cannot remove it could not tell
			// the next one it was already armed.
			if err := os.Remove(name); err != nil {
				fmt.Fprintf(os.Stderr, "cgwarden failpoint: %v\n", err)
				os.Exit(97)
			}
			spec += ";" + strings.ReplaceAll(string(b), "\n", ";")
		case !errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(os.Stderr, "cgwarden failpoint: %v\n", err)
			os.Exit(97)
		}
	}
	points, err := Parse(spec)
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
	if p == nil || p.At != 0 && n != p.At {
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
