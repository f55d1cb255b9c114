package realtest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestHostToolFindsOnPath: a tool on PATH is found by its first name that
// exists, in the order given.
func TestHostToolFindsOnPath(t *testing.T) {
	HostOnly(t, "HostTool skips in the guest by design")
	dir := t.TempDir()
	tool := filepath.Join(dir, "cgwarden-test-tool-b")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if got := HostTool(t, "nothing", "cgwarden-test-tool-a", "cgwarden-test-tool-b"); got != tool {
		t.Fatalf("HostTool = %q, want %q", got, tool)
	}
}

// TestHostToolMissingFailsWhenRequired: a missing tool is a failure under
// CGWARDEN_REQUIRE_REAL=1, never a silent skip. The check runs HostTool on
// a recording testing.TB, so the outer test sees which way it ended.
func TestHostToolMissingFailsWhenRequired(t *testing.T) {
	HostOnly(t, "HostTool skips in the guest by design")
	t.Setenv("PATH", t.TempDir())
	for _, required := range []string{"1", ""} {
		t.Setenv(EnvRequire, required)
		rec := &recorder{TB: t}
		done := make(chan struct{})
		go func() { // Fatal and Skip end their goroutine, as in a test
			defer close(done)
			HostTool(rec, "nothing", "cgwarden-test-no-such-tool")
		}()
		<-done
		if wantFail := required == "1"; rec.failed != wantFail || rec.skipped == wantFail {
			t.Errorf("%s=%q: failed %v, skipped %v; want failed %v", EnvRequire, required, rec.failed, rec.skipped, wantFail)
		}
	}
}

// recorder is a testing.TB whose Fatal and Skip end the calling goroutine
// and are remembered instead of ending the test.
type recorder struct {
	testing.TB
	failed, skipped bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }
func (r *recorder) Skipf(string, ...any)  { r.skipped = true; runtime.Goexit() }
