package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// The -update flag rewrites golden files. It is registered in init, after
// every package-level variable, so that a golden test of another command
// that declares the same flag wins and both read the one flag.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files in testdata/golden")
	}
}

func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// golden compares got with testdata/golden/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", "golden", name)
	if updating() {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/cli -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file; if the change is intended, rerun with -update and review the diff.\ngot:\n%s", p, got)
	}
}

// run runs the CLI and returns stdout, stderr and the exit code Main would
// return.
func run(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	root := NewRoot(&out, &errb)
	root.SetArgs(args)
	code := exitCode(root, root.Execute())
	return out.String(), errb.String(), code
}

const seed000 = "../examples/snapshots/seed-000-eks-neonvm"

func TestAuditGolden(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"audit-seed-000", []string{"--snapshot", "example:seed-000-eks-neonvm", "--pods", seed000 + ".pods.json", "--vms", seed000 + ".vms.json"}, 1},
		{"audit-seed-003", []string{"--snapshot", "example:seed-003-k3s-spin"}, 1},
	}
	for _, c := range cases {
		for _, format := range []string{"text", "json"} {
			t.Run(c.name+"."+format, func(t *testing.T) {
				out, errs, code := run(append([]string{"audit", "-o", format}, c.args...)...)
				if code != c.code {
					t.Fatalf("exit code %d, want %d (stderr %q)", code, c.code, errs)
				}
				if format == "json" {
					var doc struct {
						Findings []map[string]any `json:"findings"`
					}
					if err := json.Unmarshal([]byte(out), &doc); err != nil {
						t.Fatalf("not JSON: %v", err)
					}
					for _, f := range doc.Findings {
						for _, k := range []string{"rule", "severity", "subject", "evidence", "message", "remedy"} {
							if _, ok := f[k]; !ok {
								t.Fatalf("finding without %q: %v", k, f)
							}
						}
					}
				}
				ext := ".txt"
				if format == "json" {
					ext = ".json"
				}
				golden(t, c.name+ext, []byte(out))
			})
		}
	}
}

// TestAuditExitCodes: --fail-on moves the bar; a failed audit is 2.
func TestAuditExitCodes(t *testing.T) {
	cases := []struct {
		args []string
		code int
	}{
		// Seed 000 without metadata has only warnings.
		{[]string{"--snapshot", "example:seed-000-eks-neonvm"}, 0},
		{[]string{"--snapshot", "example:seed-000-eks-neonvm", "--fail-on", "warning"}, 1},
		{[]string{"--snapshot", "example:seed-000-eks-neonvm", "--fail-on", "info"}, 1},
		{[]string{"--snapshot", "example:seed-003-k3s-spin", "--fail-on", "error"}, 1},
		{[]string{"--snapshot", "example:no-such-snapshot"}, 2},
		{[]string{"--snapshot", "example:seed-003-k3s-spin", "--fail-on", "panic"}, 2},
		{[]string{"--snapshot", "example:seed-003-k3s-spin", "-o", "wide"}, 2},
		{[]string{"--snapshot", "example:seed-003-k3s-spin", "--vms", seed000 + ".vms.json"}, 2},
		{[]string{"--snapshot", "example:seed-003-k3s-spin", "--pods", seed000 + ".pods.json", "--vms", "/nonexistent"}, 2},
		{[]string{"--snapshot", "example:seed-003-k3s-spin", "--starvation-cores", "-1"}, 2},
	}
	for _, c := range cases {
		_, errs, code := run(append([]string{"audit"}, c.args...)...)
		if code != c.code {
			t.Errorf("audit %v: exit %d, want %d (stderr %q)", c.args, code, c.code, errs)
		}
	}
}
