package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "record the streams in testdata/ again from the module tiny and rewrite their goldens")

// tiny is the module whose `go test -json` streams are recorded in
// testdata/: a test that passes, one skipped, one that fails with subtests
// and more messages than are shown, a panic, a build error, a timeout, an
// os.Exit in a test and a package without tests.
var tiny = map[string]string{
	"go.mod": "module tiny\n\ngo 1.26\n",
	"pass/pass_test.go": `package pass

import (
	"strings"
	"testing"
)

func TestPass(t *testing.T) { t.Log("fine") }

func TestSkip(t *testing.T) { t.Skip("not here") }

func TestFail(t *testing.T) {
	t.Log("first line\nsecond line")
	t.Run("good", func(t *testing.T) {})
	t.Run("bad", func(t *testing.T) { t.Error("bad broke") })
	for i := range 38 {
		t.Logf("message %02d", i)
	}
	t.Error(strings.Repeat("x", 700))
}
`,
	"panics/panics_test.go": `package panics

import "testing"

func TestOK(t *testing.T) {}

func TestPanic(t *testing.T) { t.Log("before"); panic("boom") }
`,
	"broken/broken_test.go": `package broken

import "testing"

func TestBroken(t *testing.T) { undefined() }
`,
	"hangs/hangs_test.go": `package hangs

import (
	"testing"
	"time"
)

func TestHang(t *testing.T) { t.Run("inner", func(t *testing.T) { time.Sleep(time.Minute) }) }
`,
	"exits/exits_test.go": `package exits

import (
	"os"
	"testing"
)

func TestExit(t *testing.T) { t.Log("bye"); os.Exit(3) }
`,
	"empty/empty.go": "package empty\n",
}

// streams: each recording in testdata/, the go test arguments and
// environment it is recorded with, and what testsum says of it.
var streams = []struct {
	file   string
	args   []string
	env    []string
	status int
	count  string
	stderr string
}{
	{"all.json", []string{"-timeout", "5s", "./..."}, nil, 1, "tiny: 3 passed, 6 failed, 1 skipped", ""},
	{"pass.json", []string{"-run", "^Test(Pass|Skip|OK)$", "./pass", "./panics", "./empty"}, nil, 0, "tiny: 2 passed, 0 failed, 1 skipped", ""},
	// Build errors as text, as before Go 1.24.
	{"buildtext.json", []string{"-run", "^TestOK$", "./broken", "./panics"}, []string{"GODEBUG=gotestjsonbuildtext=1"}, 1, "tiny: 1 passed, 0 failed, 0 skipped", ""},
	{"none.json", []string{"./empty"}, nil, 1, "tiny: 0 passed, 0 failed, 0 skipped", "tiny: no test passed\n"},
}

func TestRecordedStreams(t *testing.T) {
	if *update {
		record(t)
	}
	for _, s := range streams {
		t.Run(s.file, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", s.file))
			if err != nil {
				t.Fatal(err)
			}
			var out, errOut, log bytes.Buffer
			status := run(bytes.NewReader(in), &out, &errOut, &log, "tiny")
			golden := filepath.Join("testdata", strings.TrimSuffix(s.file, ".json")+".txt")
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != string(want) {
				t.Errorf("output differs from %s (go test ./test/testsum -update rewrites it):\n%s", golden, out.String())
			}
			if status != s.status || errOut.String() != s.stderr {
				t.Errorf("status %d, stderr %q; want %d, %q", status, errOut.String(), s.status, s.stderr)
			}
			if lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); lines[len(lines)-1] != s.count {
				t.Errorf("count line %q, want %q", lines[len(lines)-1], s.count)
			}
			if !strings.Contains(log.String(), "=== RUN") && s.file != "none.json" {
				t.Errorf("the log has no === RUN line:\n%s", log.String())
			}
		})
	}
}

// TestFailures checks the failure section of all.json beyond its golden.
func TestFailures(t *testing.T) {
	in, err := os.ReadFile("testdata/all.json")
	if err != nil {
		t.Fatal(err)
	}
	var out, log bytes.Buffer
	run(bytes.NewReader(in), &out, &bytes.Buffer{}, &log, "tiny")
	_, failures, ok := strings.Cut(out.String(), "-- tiny failures:\n")
	if !ok {
		t.Fatalf("no failures section:\n%s", out.String())
	}
	for _, want := range []string{
		"-- TestFail:\n", "bad broke\n", "message 37\n", " " + strings.Repeat("x", 600-len("    pass_test.go:19: ")) + "\n",
		"-- TestPanic:\n", "panic: boom",
		"-- TestHang (did not finish):\n", "panic: test timed out after 5s",
		"-- TestExit (did not finish):\n", "bye\n",
		"-- package tiny/broken failed, but none of its tests",
	} {
		if !strings.Contains(failures, want) {
			t.Errorf("the failures lack %q:\n%s", want, failures)
		}
	}
	// Only the last 40 messages (one too many: the first goes), and of
	// each only its first line (the rest is in the log).
	for _, notWant := range []string{"first line", "second line", "-- TestPass", "-- TestOK"} {
		if strings.Contains(failures, notWant) {
			t.Errorf("the failures show %q:\n%s", notWant, failures)
		}
		if !strings.Contains(log.String(), strings.TrimPrefix(notWant, "-- ")) {
			t.Errorf("the log lacks %q", notWant)
		}
	}
	// The build error, shown as it came.
	if !strings.Contains(out.String(), "undefined: undefined\n") {
		t.Errorf("the build error is not shown:\n%s", out.String())
	}
}

// TestStatus: hand-made streams for what the recordings lack.
func TestStatus(t *testing.T) {
	const (
		start = `{"Action":"start","Package":"p"}` + "\n"
		pass  = `{"Action":"run","Package":"p","Test":"TestA"}` + "\n" + `{"Action":"pass","Package":"p","Test":"TestA"}` + "\n"
		ok    = `{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}` + "\n" + `{"Action":"pass","Package":"p"}` + "\n"
		fail  = `{"Action":"fail","Package":"p"}` + "\n"
	)
	for _, c := range []struct {
		name, stream string
		status       int
		shown        string
	}{
		{"passed", start + pass + ok, 0, "ok  \tp\t0.1s\n"},
		{"downloading", "go: downloading example.com/m v1.0.0\n" + start + pass + ok, 0, "go: downloading"},
		{"not JSON", "# p\np.go:1: oops\n" + start + pass + ok, 1, "p.go:1: oops\n"},
		{"package failed", start + pass + fail, 1, "-- tiny failures:\n-- package p failed, but none of its tests"},
		{"stream cut short", start + `{"Action":"run","Package":"p","Test":"TestA"}` + "\n" + `{"Action":"pass","Package":"p","Test":"TestA"}`, 1, "FAIL\tp [no result: the stream ended]\n"},
		{"test cut short", start + pass + `{"Action":"run","Package":"p","Test":"TestB"}` + "\n", 1, "-- TestB (did not finish):\n"},
	} {
		var out bytes.Buffer
		if status := run(strings.NewReader(c.stream), &out, &bytes.Buffer{}, &bytes.Buffer{}, "tiny"); status != c.status {
			t.Errorf("%s: status %d, want %d:\n%s", c.name, status, c.status, out.String())
		}
		if !strings.Contains(out.String(), c.shown) {
			t.Errorf("%s: the output lacks %q:\n%s", c.name, c.shown, out.String())
		}
	}
}

// record writes tiny into a scratch directory and records each stream of
// `go test -json` on it (stdout and stderr together, as scripts/test pipes
// them) into testdata/.
func record(t *testing.T) {
	dir := t.TempDir()
	for name, text := range tiny {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range streams {
		var b bytes.Buffer
		cmd := exec.Command("go", append([]string{"test", "-count=1", "-json"}, s.args...)...)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, append(os.Environ(), s.env...), &b, &b
		if err := cmd.Run(); err != nil {
			if _, exited := err.(*exec.ExitError); !exited {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join("testdata", s.file), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
