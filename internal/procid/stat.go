package procid

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
)

// Stat is what cgwarden reads of /proc/<pid>/stat.
type Stat struct {
	PID int
	// Comm is the command name between the parentheses (anything, spaces
	// and parentheses included, up to 15 bytes on the kernels we know).
	Comm string
	// State is the state letter (R, S, D, Z, X, ...).
	State byte
	// PPID is field 4, the parent's PID as the reading /proc's PID
	// namespace numbers it (0 for PID 1 and kernel threads' kthreadd).
	// A process whose parent exits is handed to the nearest subreaper
	// ancestor (a container runtime's shim is one) or PID 1.
	PPID int
	// StartTime is field 22, starttime: when the process started, in
	// clock ticks (USER_HZ) after boot. It never changes while the
	// process lives, so it tells the process from a later one given the
	// same PID.
	StartTime uint64
}

// startField is starttime's position counted from the state (field 3 of
// proc(5)'s numbering is index 0 here): field 22 → 19.
const startField = 22 - 3

// ParseError is a /proc/<pid>/stat text that is not what proc(5) says.
type ParseError struct {
	// Text is the start of what was parsed (clipped).
	Text string
	Why  string
	Err  error
}

func (e *ParseError) Error() string {
	msg := fmt.Sprintf("/proc/<pid>/stat %q: %s", e.Text, e.Why)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *ParseError) Unwrap() error { return e.Err }

// ParseStat parses one /proc/<pid>/stat line: "<pid> (<comm>) <state>
// <ppid> ... <starttime> ...". The command may hold spaces and
// parentheses ("(sd-pam)", "a) b"), so it ends at the LAST ')'; every
// field after it is a plain number or the state letter.
func ParseStat(text string) (Stat, error) {
	bad := func(why string, err error) (Stat, error) {
		return Stat{}, &ParseError{Text: clip(text), Why: why, Err: err}
	}
	open := strings.IndexByte(text, '(')
	end := strings.LastIndexByte(text, ')')
	if open < 0 || end < open {
		return bad("no parenthesised command", nil)
	}
	pidText := strings.TrimSuffix(text[:open], " ")
	if len(pidText) != open-1 {
		return bad("no space between the PID and the command", nil)
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return bad(fmt.Sprintf("PID %q is not a positive number", pidText), err)
	}
	rest := text[end+1:]
	if !strings.HasPrefix(rest, " ") {
		return bad("no space after the command", nil)
	}
	// The kernel writes one space between fields: the state is the byte
	// right after the command's space, a letter followed by a space.
	if len(rest) < 3 || !isLetter(rest[1]) || rest[2] != ' ' {
		return bad(fmt.Sprintf("no state letter after the command (%q)", clip(rest)), nil)
	}
	f := strings.Fields(rest)
	if len(f) <= startField {
		return bad(fmt.Sprintf("%d fields after the command, starttime is field %d", len(f), startField+3), nil)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil || ppid < 0 {
		return bad(fmt.Sprintf("ppid (field 4) %q is not a PID", f[1]), err)
	}
	start, err := strconv.ParseUint(f[startField], 10, 64)
	if err != nil {
		return bad(fmt.Sprintf("starttime (field 22) %q", f[startField]), err)
	}
	return Stat{PID: pid, Comm: text[open+1 : end], State: f[0][0], PPID: ppid, StartTime: start}, nil
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// Start reads the start time of process pid from /proc/<pid>/stat
// through fsys. A process that does not exist gives an error wrapping
// fs.ErrNotExist.
func Start(fsys cgroupfs.FS, pid int) (uint64, error) {
	st, err := Read(fsys, pid)
	if err != nil {
		return 0, err
	}
	return st.StartTime, nil
}

// Read reads and parses /proc/<pid>/stat through fsys. A process that
// does not exist gives an error wrapping fs.ErrNotExist.
func Read(fsys cgroupfs.FS, pid int) (Stat, error) {
	p := fmt.Sprintf("/proc/%d/stat", pid)
	b, err := fsys.ReadFile(p)
	if err != nil {
		return Stat{}, err
	}
	st, err := ParseStat(string(b))
	if err != nil {
		return Stat{}, fmt.Errorf("%s: %w", p, err)
	}
	if st.PID != pid {
		return Stat{}, fmt.Errorf("%s names process %d", p, st.PID)
	}
	return st, nil
}

// BootIDPath is the file holding the node's boot ID, a random UUID the
// kernel makes at every boot.
const BootIDPath = "/proc/sys/kernel/random/boot_id"

// ParseBootID checks the content of BootIDPath: one UUID (36 characters,
// hex digits and dashes), with or without its newline.
func ParseBootID(text string) (string, error) {
	id := strings.TrimSuffix(text, "\n")
	if len(id) != 36 {
		return "", fmt.Errorf("boot ID %q: not a UUID (%d characters)", clip(id), len(id))
	}
	for i, c := range id {
		dash := i == 8 || i == 13 || i == 18 || i == 23
		if dash != (c == '-') || !dash && !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return "", fmt.Errorf("boot ID %q: not a UUID", id)
		}
	}
	return id, nil
}

// Boot reads the node's boot ID through fsys (the door's errors carry
// the path; every kernel cgwarden supports has the file).
func Boot(fsys cgroupfs.FS) (string, error) {
	b, err := fsys.ReadFile(BootIDPath)
	if err != nil {
		return "", err
	}
	id, err := ParseBootID(string(b))
	if err != nil {
		return "", fmt.Errorf("%s: %w", BootIDPath, err)
	}
	return id, nil
}
