package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Proc is a process a journal entry names: its PID and, for a process a
// move moved, its start time (procid.Start: field 22 of /proc/<pid>/stat,
// clock ticks after boot). The PID alone names whoever has it now; with
// the start time and the boot ID of its step (Entry.Boot) it names the
// one process cgwarden moved, and a later process given the same PID is
// told apart (see fix's revert).
//
// Journals written before start times were recorded hold bare PIDs
// ("pids":[1234]); they still read, as a Proc without Start. For those,
// cgwarden assumes what it assumed when it wrote them: the PID is the
// process moved. That assumption is narrow, because a revert moves only
// what is in the cgroups cgwarden made, never a PID from the journal into
// them; a PID reused since is at worst reported as not exited.
type Proc struct {
	PID int
	// Start is nil when the journal did not record it (written before
	// start times were, or a process that is not a move's: an undo's).
	Start *uint64
}

// procJSON is a Proc with a start time as the journal writes it.
type procJSON struct {
	PID   int     `json:"pid"`
	Start *uint64 `json:"start"`
}

// MarshalJSON writes a Proc without a start time as its bare PID (the
// form every journal used before), one with it as {"pid":..,"start":..}.
func (p Proc) MarshalJSON() ([]byte, error) {
	if p.Start == nil {
		return strconv.AppendInt(nil, int64(p.PID), 10), nil
	}
	return json.Marshal(procJSON{p.PID, p.Start})
}

// UnmarshalJSON reads either form, strictly (the journal is parsed with
// unknown fields refused).
func (p *Proc) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] != '{' {
		var pid int
		if err := json.Unmarshal(b, &pid); err != nil {
			return fmt.Errorf("process %s: %w", b, err)
		}
		*p = Proc{PID: pid}
		return nil
	}
	var v procJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("process %s: %w", b, err)
	}
	if v.PID <= 0 {
		return errors.New("process without a PID")
	}
	*p = Proc{PID: v.PID, Start: v.Start}
	return nil
}

// Bare names processes by PID alone (moved back by an undo, or from a
// listing that read no start times).
func Bare(pids []int) []Proc {
	var out []Proc
	for _, p := range pids {
		out = append(out, Proc{PID: p})
	}
	return out
}
