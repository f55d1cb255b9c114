package procid

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"
)

// A line of a real /proc/<pid>/stat (cat on this machine's kernel 6.18).
const catStat = "24840 (cat) R 24835 24835 19640 0 -1 4194304 99 0 0 0 0 0 0 0 20 0 1 0 4937096 3133440 360 18446744073709551615 94720879693824 94720879713705 140722183170016 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 94720879729712 94720879731328 94721234665472 140722183174624 140722183174644 140722183174644 140722183176171 0\n"

// tail is what follows the command in catStat.
var tail = catStat[strings.Index(catStat, ") ")+1:]

func TestParseStat(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       Stat
		err        string
	}{
		{"real", catStat, Stat{PID: 24840, Comm: "cat", State: 'R', PPID: 24835, StartTime: 4937096}, ""},
		{"comm with spaces and parentheses", "7 (a) b (c) d)" + tail, Stat{PID: 7, Comm: "a) b (c) d", State: 'R', PPID: 24835, StartTime: 4937096}, ""},
		{"systemd's (sd-pam)", "812 ((sd-pam))" + tail, Stat{PID: 812, Comm: "(sd-pam)", State: 'R', PPID: 24835, StartTime: 4937096}, ""},
		{"empty comm", "9 ()" + tail, Stat{PID: 9, Comm: "", State: 'R', PPID: 24835, StartTime: 4937096}, ""},
		{"zombie", "9 (x) Z 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77", Stat{PID: 9, Comm: "x", State: 'Z', PPID: 1, StartTime: 77}, ""},
		{"ppid not a number", "9 (x) S y 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77", Stat{}, "ppid (field 4)"},
		{"ppid negative", "9 (x) S -1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77", Stat{}, "ppid (field 4)"},
		{"empty", "", Stat{}, "no parenthesised command"},
		{"no comm", "12 R 1 2 3", Stat{}, "no parenthesised command"},
		{"reversed parentheses", "12 )x( R", Stat{}, "no parenthesised command"},
		{"no pid", "(cat)" + tail, Stat{}, "no space between the PID and the command"},
		{"pid not a number", "x1 (cat)" + tail, Stat{}, "is not a positive number"},
		{"pid zero", "0 (cat)" + tail, Stat{}, "is not a positive number"},
		{"pid negative", "-3 (cat)" + tail, Stat{}, "is not a positive number"},
		{"two spaces before comm", "12  (cat)" + tail, Stat{}, "is not a positive number"},
		{"nothing after comm", "12 (cat)", Stat{}, "no space after the command"},
		{"glued after comm", "12 (cat)R 1", Stat{}, "no space after the command"},
		{"two spaces after comm", "12 (cat)  R" + tail[2:], Stat{}, "no state letter"},
		{"state a digit", "12 (cat) 0" + tail[2:], Stat{}, "no state letter"},
		{"short", "12 (cat) R 1 2 3 4 5", Stat{}, "6 fields after the command, starttime is field 22"},
		{"starttime not a number", "9 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -77", Stat{}, "starttime (field 22)"},
		{"state two letters", "9 (x) SS 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77", Stat{}, "no state letter"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseStat(c.text)
			if c.err != "" {
				var pe *ParseError
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.As(err, &pe) {
					t.Fatalf("ParseStat = %+v, %v; want a *ParseError saying %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("ParseStat = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestParseBootID(t *testing.T) {
	good := "6e344e4e-bb4d-4378-8c4a-73310ce35a7c"
	if id, err := ParseBootID(good + "\n"); err != nil || id != good {
		t.Errorf("ParseBootID(%q) = %q, %v", good, id, err)
	}
	for _, bad := range []string{"", "\n", "6e344e4e", good + "x", "6e344e4e-bb4d-4378-8c4a_73310ce35a7c", "6e344e4e-bb4d-4378-8c4a-73310ce35a7g", good + "\n\n"} {
		if id, err := ParseBootID(bad); err == nil {
			t.Errorf("ParseBootID(%q) = %q, want an error", bad, id)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	for _, s := range []string{catStat, "7 (a) b (c) d)" + tail, "812 ((sd-pam))" + tail, "", "12 (cat)", "1 ()) R", "9 (x) Z 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77", "(", ")", "1 (\n) R" + tail} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		st, err := ParseStat(text)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			return
		}
		if st.PID <= 0 {
			t.Fatalf("parsed PID %d from %q", st.PID, text)
		}
		// What parsed renders back to a line that parses the same.
		again, err := ParseStat(fmt.Sprintf("%d (%s) %c%s", st.PID, st.Comm, st.State, text[strings.LastIndexByte(text, ')')+2+1:]))
		if err != nil || again != st {
			t.Fatalf("%q parsed as %+v, its rendering as %+v, %v", text, st, again, err)
		}
	})
}

func FuzzParseBootID(f *testing.F) {
	for _, s := range []string{"6e344e4e-bb4d-4378-8c4a-73310ce35a7c\n", "", "-", "6e344e4e-bb4d-4378-8c4a-73310ce35a7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		id, err := ParseBootID(text)
		if err == nil && (len(id) != 36 || strings.Count(id, "-") != 4) {
			t.Fatalf("ParseBootID(%q) = %q", text, id)
		}
	})
}

// dirFS reads the live /proc as cgroupfs.FS does (no root but /).
type dirFS struct{}

func (dirFS) ReadFile(p string) ([]byte, error) { return os.ReadFile(p) }
func (dirFS) ReadDirs(string) ([]string, error) { return nil, nil }

func TestStartAndBootOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	a, err := Start(dirFS{}, os.Getpid())
	if err != nil || a == 0 {
		t.Fatalf("Start(self) = %d, %v", a, err)
	}
	if b, _ := Start(dirFS{}, os.Getpid()); b != a {
		t.Errorf("start time changed: %d then %d", a, b)
	}
	if _, err := Start(dirFS{}, 1<<30); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Start of no process: %v, want fs.ErrNotExist", err)
	}
	if id, err := Boot(dirFS{}); err != nil || len(id) != 36 {
		t.Errorf("Boot = %q, %v", id, err)
	}
}
