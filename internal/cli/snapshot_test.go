package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// writeTemp writes text to a file in a fresh directory and returns its path.
func writeTemp(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func seed003Text(t *testing.T) string {
	t.Helper()
	b, ok := examples.Open("seed-003-k3s-spin")
	if !ok {
		t.Fatal("no seed-003 example")
	}
	return string(b)
}

// unseal turns a sealed snapshot into one as cgwarden wrote it before
// snapshots were sealed: no "seal" header line, no closing section.
func unseal(t *testing.T, text string) string {
	t.Helper()
	i := strings.Index(text, "\n-- cgwarden-end --\n")
	if i < 0 || !strings.Contains(text, "\nseal: sha256\n") {
		t.Fatal("not a sealed snapshot")
	}
	return strings.Replace(text[:i+1], "\nseal: sha256\n", "\n", 1)
}

// Seed 003 cut in half (the second pod and the misplaced container gone)
// used to audit as "No findings." with exit 0. A sealed snapshot cut or
// edited is refused with exit 2 and the reason; the whole one still finds
// the misplaced container.
func TestAuditRefusesDamagedSnapshot(t *testing.T) {
	text := seed003Text(t)
	half := text[:strings.LastIndex(text[:len(text)/2], "\n-- ")+1]
	edited := strings.Replace(text, "usage_usec 26392435", "usage_usec 16392435", 1)
	if edited == text {
		t.Fatal("seed 003 has no usage_usec 26392435 to edit")
	}
	for name, c := range map[string]struct{ text, want string }{
		"cut in half": {half, "cut short or was edited"},
		"edited":      {edited, "changed after it was written"},
	} {
		out, errs, code := run("audit", "--snapshot", writeTemp(t, "seed-003.txtar", c.text))
		if code != 2 || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2, no output, and an error saying %q", name, code, out, errs, c.want)
		}
	}
	if _, errs, code := run("audit", "--snapshot", writeTemp(t, "seed-003.txtar", text)); code != 1 || errs != "" {
		t.Errorf("whole seed 003: exit %d, stderr %q; want exit 1 (the misplaced container) and no warning", code, errs)
	}
}

// A snapshot from before sealing still loads, with a warning on stderr,
// and audits the same as the sealed one.
func TestUnsealedSnapshotWarns(t *testing.T) {
	text := seed003Text(t)
	old := writeTemp(t, "old.txtar", unseal(t, text))
	sealedOut, _, _ := run("audit", "--snapshot", "example:seed-003-k3s-spin")
	out, errs, code := run("audit", "--snapshot", old)
	if code != 1 || out != sealedOut {
		t.Errorf("unsealed seed 003: exit %d, output differs from the sealed one's: %v", code, out != sealedOut)
	}
	if !strings.Contains(errs, "warning: snapshot "+old+" does not prove it is whole") {
		t.Errorf("no warning on stderr: %q", errs)
	}
	for _, args := range [][]string{{"inspect"}, {"fix", "--journal-dir", t.TempDir()}} {
		if _, errs, _ := run(append(args, "--snapshot", old)...); !strings.Contains(errs, "does not prove it is whole") {
			t.Errorf("%v: no warning on stderr: %q", args, errs)
		}
	}
}

// snapshot -f: "-" is stdout, an existing file needs --force, and -o
// never writes a file named after a format or "-".
func TestSnapshotFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "node.snapshot")
	if _, errs, code := run("snapshot", "-f", file, "--interval", "0"); code != 0 {
		t.Fatalf("snapshot -f: exit %d: %s", code, errs)
	}
	s, err := LoadSnapshot(file)
	if err != nil || !s.Sealed {
		t.Fatalf("the written snapshot: %v (sealed %v)", err, s != nil && s.Sealed)
	}
	before, _ := os.ReadFile(file)
	_, errs, code := run("snapshot", "-f", file, "--interval", "0")
	if code != 2 || !strings.Contains(errs, "exists: give --force") {
		t.Errorf("overwrite without --force: exit %d, %q", code, errs)
	}
	if after, _ := os.ReadFile(file); string(after) != string(before) {
		t.Error("the existing file was changed")
	}
	if _, errs, code := run("snapshot", "-f", file, "--interval", "0", "--force"); code != 0 {
		t.Errorf("--force: exit %d: %s", code, errs)
	}
	out, errs, code := run("snapshot", "-f", "-", "--interval", "0")
	if code != 0 || !strings.HasPrefix(out, "cgwarden snapshot v1\n") {
		t.Fatalf("-f -: exit %d, stderr %q, stdout starts %q", code, errs, out[:min(len(out), 40)])
	}
	if _, err := snapshot.Load(strings.NewReader(out)); err != nil {
		t.Errorf("-f - wrote no loadable snapshot: %v", err)
	}
	// The old -o FILE keeps working; -o with a format or - is refused.
	if _, errs, code := run("snapshot", "-o", filepath.Join(dir, "old-style"), "--interval", "0"); code != 0 {
		t.Errorf("-o FILE: exit %d: %s", code, errs)
	}
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	for _, bad := range []string{"-", "json", "yaml", "text"} {
		_, errs, code := run("snapshot", "-o", bad, "--interval", "0")
		if code != 2 || !strings.Contains(errs, "-f FILE") {
			t.Errorf("-o %s: exit %d, %q", bad, code, errs)
		}
		if _, err := os.Stat(filepath.Join(dir, bad)); err == nil {
			t.Errorf("-o %s wrote a file named %q", bad, bad)
		}
	}
	if _, _, code := run("snapshot"); code != 2 {
		t.Errorf("snapshot without -f: exit %d", code)
	}
}

// overlayFS serves extra files over a snapshot's sample.
type overlayFS struct {
	cgroupfs.FS
	extra map[string]string
}

func (o overlayFS) ReadFile(p string) ([]byte, error) {
	if s, ok := o.extra[p]; ok {
		return []byte(s), nil
	}
	return o.FS.ReadFile(p)
}

// A snapshot records what fix reads to plan: taken from a seed-003 node
// whose pod cgroup already enables cpu, memory and pids for its children,
// fix --snapshot plans no cgroup.subtree_control write (the embedded
// example, which does not record the file, plans one). The seed's pods
// file confirms the container (without it, nothing is moved). The
// recording itself needs no metadata: it plans the unconfirmed too.
func TestSnapshotRecordsWhatFixReads(t *testing.T) {
	s, err := LoadSnapshot("example:seed-003-k3s-spin")
	if err != nil {
		t.Fatal(err)
	}
	pod := "/sys/fs/cgroup/kubepods.slice/kubepods-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice/"
	node := overlayFS{s.Samples[0].FS, map[string]string{
		pod + "cgroup.controllers":     "cpuset cpu io memory pids\n",
		pod + "cgroup.subtree_control": "cpu memory pids\n",
	}}
	rec := snapshot.NewRecorder(node)
	if err := record(&inventory.Sampling{Demand: true}, rec, s.Samples[0].Time); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snapshot.Write(&buf, rec, nil, s.Samples[0].Time, 0, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cgroup.controllers", "cgroup.subtree_control"} {
		if !strings.Contains(buf.String(), "-- "+pod+f+" --\n") {
			t.Errorf("the snapshot does not record %s", pod+f)
		}
	}
	out, errs, code := run("fix", "--snapshot", writeTemp(t, "node.snapshot", buf.String()), "--pods", seed003Pods, "--journal-dir", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "Plan: 6 operations.") || strings.Contains(out, "cgroup.subtree_control") || errs != "" {
		t.Errorf("the plan enables controllers the node has enabled (stderr %q):\n%s", errs, out)
	}
	// The embedded example does not record them: the plan has the write,
	// and stderr says it may not be needed.
	_, errs, _ = run("fix", "--snapshot", "example:seed-003-k3s-spin", "--pods", seed003Pods, "--journal-dir", t.TempDir())
	if !strings.Contains(errs, "does not record cgroup.controllers and cgroup.subtree_control of "+strings.TrimSuffix(pod, "/")) {
		t.Errorf("no warning that the controller write rests on files the snapshot lacks: %q", errs)
	}
}
