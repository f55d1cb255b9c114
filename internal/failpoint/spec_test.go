//go:build failpoints

package failpoint

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	good := map[string]map[string]*Point{
		"":                             {},
		"a=panic":                      {"a": {Action: Panic, At: 1}},
		"journal/before-append=kill@3": {"journal/before-append": {Action: Kill, At: 3}},
		"journal/before-append=skip@*": {"journal/before-append": {Action: Skip, At: 0}},
		" a=stall=250ms@2 ; b=skip ;":  {"a": {Action: Stall, Stall: 250 * time.Millisecond, At: 2}, "b": {Action: Skip, At: 1}},
	}
	for in, want := range good {
		got, err := Parse(in)
		if err != nil {
			t.Errorf("Parse(%q): %v", in, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Parse(%q) = %v, want %v", in, got, want)
		}
	}
	bad := map[string]string{
		"a":             "want point=action",
		"=kill":         "want point=action",
		"a=explode":     "unknown action",
		"a=kill@0":      "not a number from 1",
		"a=kill@x":      "not a number from 1",
		"a=kill@**":     "not a number from 1",
		"a=stall":       "positive duration",
		"a=stall=-1s":   "positive duration",
		"a=panic=1":     "takes no argument",
		"a=kill;a=skip": "armed twice",
	}
	for in, want := range bad {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) error = %v, want one saying %q", in, err, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"a=panic", "a=stall=1s@2;b=kill", "x=skip@9", "=", ";;", "a=stall=@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		points, err := Parse(s)
		if err != nil {
			return
		}
		for name, p := range points {
			if name == "" || p.At < 0 || (p.Action == Stall) != (p.Stall > 0) {
				t.Fatalf("Parse(%q) accepted %q: %+v", s, name, p)
			}
		}
	})
}
