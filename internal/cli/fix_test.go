package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := NewRoot(&out, &errb)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// The dry run from the seed-003 snapshot prints the adopt plan and says
// nothing changed; the exact text is golden-tested in internal/plan.
// Without pod metadata the misplaced container is only named by its
// cgroup: it is not moved, and the plan says why.
func TestFixDryRunFromSnapshot(t *testing.T) {
	out, err := runCLI(t, "fix", "--snapshot", "example:seed-003-k3s-spin", "--journal-dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "[misplaced-container] move every process") || !strings.Contains(out, "only its name says it belongs to the pod") {
		t.Errorf("without pod metadata: want the container skipped as unconfirmed:\n%s", out)
	}
	out, err = runCLI(t, "fix", "--snapshot", "example:seed-003-k3s-spin", "--pods", seed003Pods, "--journal-dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Plan: 7 operations.", "[misplaced-container] move every process", "This was a dry run from a snapshot: nothing was changed.", "run `cgwarden fix --apply` on the node the snapshot was taken from"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// --apply refuses snapshots: the dry run must not tell to run with it.
	if strings.Contains(out, "Run with --apply") {
		t.Errorf("a dry run from a snapshot tells to run with --apply, which refuses snapshots:\n%s", out)
	}
	out, err = runCLI(t, "fix", "--snapshot", "example:seed-003-k3s-spin", "--pods", seed003Pods, "--journal-dir", t.TempDir(), "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Ops []struct{ Kind, Rule string }
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil || len(p.Ops) != 7 || p.Ops[6].Kind != "move" || p.Ops[6].Rule != "misplaced-container" {
		t.Fatalf("json plan %+v, %v:\n%s", p, err, out)
	}
}

func TestFixRefusesBadRequests(t *testing.T) {
	for name, args := range map[string][]string{
		"apply a snapshot": {"fix", "--snapshot", "example:seed-003-k3s-spin", "--apply"},
		"unknown rule":     {"fix", "--snapshot", "example:seed-003-k3s-spin", "--only", "cpu-weights"},
		"unknown pod":      {"fix", "--snapshot", "example:seed-003-k3s-spin", "--pod", "nope"},
		"bad output":       {"fix", "--snapshot", "example:seed-003-k3s-spin", "-o", "yaml"},
		"revert snapshot":  {"revert", "--snapshot", "example:seed-003-k3s-spin"},
	} {
		if _, err := runCLI(t, append(args, "--journal-dir", t.TempDir())...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestRevertWithEmptyJournal(t *testing.T) {
	out, err := runCLI(t, "revert", "--journal-dir", t.TempDir())
	if err != nil || !strings.Contains(out, "Nothing to revert.") {
		t.Fatalf("revert with an empty journal: %q, %v", out, err)
	}
}

// A --journal-dir that does not exist, or is a file, is refused (exit 2,
// naming it) rather than read as an empty journal: a typo would otherwise
// answer "Nothing to revert." while the real journal's changes stay.
func TestRevertRefusesAMissingJournalDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "typo")
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{missing, file} {
		out, err := runCLI(t, "revert", "--all", "--journal-dir", dir)
		var exit *ExitError
		if !errors.As(err, &exit) || exit.Code != 2 || !strings.Contains(err.Error(), dir) {
			t.Errorf("revert --journal-dir %s: %q, %v; want exit 2 naming it", dir, out, err)
		}
		if strings.Contains(out, "Nothing to revert") {
			t.Errorf("revert --journal-dir %s said %q", dir, out)
		}
	}
}
