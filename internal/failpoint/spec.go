//go:build failpoints

package failpoint

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Action is what an armed failpoint does.
type Action string

// Actions.
const (
	Panic Action = "panic"
	Kill  Action = "kill"
	Stall Action = "stall"
	Skip  Action = "skip"
)

// Point is one armed failpoint.
type Point struct {
	Action Action
	// Stall is how long a stall lasts.
	Stall time.Duration
	// At is the hit the point fires on (1: the first); 0 fires on every
	// hit ("@*": the deliberately broken build that drops every journal
	// append, so that a suite can show its invariants fail).
	At int
}

// Parse reads a CGWARDEN_FAILPOINTS value: "point=action[@k]" terms
// separated by ';' (see the package comment). Empty arms nothing.
func Parse(s string) (map[string]*Point, error) {
	out := map[string]*Point{}
	for _, term := range strings.Split(s, ";") {
		term = strings.TrimSpace(term)
		if term == "" {
			continue
		}
		name, spec, ok := strings.Cut(term, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("failpoint term %q: want point=action[@k]", term)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("failpoint %s armed twice", name)
		}
		p := &Point{At: 1}
		spec, at, hasAt := strings.Cut(spec, "@")
		if hasAt && at == "*" {
			p.At = 0
		} else if hasAt {
			k, err := strconv.Atoi(at)
			if err != nil || k < 1 {
				return nil, fmt.Errorf("failpoint %s: hit %q is not a number from 1 (or *, every hit)", name, at)
			}
			p.At = k
		}
		act, arg, hasArg := strings.Cut(spec, "=")
		switch p.Action = Action(act); p.Action {
		case Panic, Kill, Skip:
			if hasArg {
				return nil, fmt.Errorf("failpoint %s: %s takes no argument", name, act)
			}
		case Stall:
			d, err := time.ParseDuration(arg)
			if !hasArg || err != nil || d <= 0 {
				return nil, fmt.Errorf("failpoint %s: stall wants a positive duration (stall=2s), got %q", name, arg)
			}
			p.Stall = d
		default:
			return nil, fmt.Errorf("failpoint %s: unknown action %q (panic, kill, stall=DURATION, skip)", name, act)
		}
		out[name] = p
	}
	return out, nil
}
