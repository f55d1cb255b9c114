package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The test binary doubles as the wrapper: with MISPLACE_TEST_MAIN=1 it
// runs main, so the exec into runc is tested end to end.
func TestMain(m *testing.M) {
	if os.Getenv("MISPLACE_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestBundleOf(t *testing.T) {
	for _, c := range []struct {
		args   []string
		bundle string
		ok     bool
	}{
		// containerd's runc shim (go-runc): global flags, then create.
		{[]string{"--root", "/r", "--log", "/b/log.json", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "abc"}, "/b", true},
		{[]string{"--debug", "run", "-b", "/x", "abc"}, "/x", true},
		{[]string{"create", "--bundle=/y", "abc"}, "/y", true},
		{[]string{"create", "abc"}, ".", true},
		// A global flag's value that looks like a command is not one.
		{[]string{"--root", "create", "start", "abc"}, "", false},
		{[]string{"--root", "/r", "start", "abc"}, "", false},
		{[]string{"--root", "/r", "delete", "--force", "abc"}, "", false},
		{[]string{"--root", "/r", "update", "--resources", "-", "abc"}, "", false},
		{nil, "", false},
	} {
		b, ok := bundleOf(c.args)
		if b != c.bundle || ok != c.ok {
			t.Errorf("bundleOf(%q) = %q, %v; want %q, %v", c.args, b, ok, c.bundle, c.ok)
		}
	}
}

const id = "c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00"

func TestMisplaced(t *testing.T) {
	for in, want := range map[string]string{
		// The seed's shape: kubepods[-qos]-pod<uid_>.slice:cri-containerd:<id>.
		"/kubepods/besteffort/pod99afd520-5b3e-4c8d-8471-4b6c8ee26b4c/" + id: "/kubepods-besteffort-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice:cri-containerd:" + id,
		"/kubepods/burstable/pod99afd520-5b3e-4c8d-8471-4b6c8ee26b4c/" + id:  "/kubepods-burstable-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice:cri-containerd:" + id,
		"/kubepods/pod99afd520-5b3e-4c8d-8471-4b6c8ee26b4c/" + id:            "/kubepods-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice:cri-containerd:" + id,
		"/kubepods/podd82c9414c6904b0c925f4ead983edce4/" + id:                "/kubepods-podd82c9414c6904b0c925f4ead983edce4.slice:cri-containerd:" + id,
		// Already systemd's form (a systemd-driven kubelet): made absolute.
		"kubepods-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice:cri-containerd:" + id: "/kubepods-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice:cri-containerd:" + id,
	} {
		got, err := Misplaced(in)
		if err != nil || got != want {
			t.Errorf("Misplaced(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "/", "/system.slice/foo", "/kubepods/besteffort/pod99afd520/" + id, "/kubepods/besteffort/pod99afd520-5b3e-4c8d-8471-4b6c8ee26b4c/../../x"} {
		if got, err := Misplaced(bad); err == nil {
			t.Errorf("Misplaced(%q) = %q, want an error", bad, got)
		}
	}
}

func spec(kind, path string) string {
	return `{"ociVersion":"1.0.2-dev","annotations":{"io.kubernetes.cri.container-type":"` + kind + `"},` +
		`"linux":{"cgroupsPath":"` + path + `","resources":{"memory":{"limit":9223372036854775807,"swap":-1},"cpu":{"shares":2}}},"process":{"args":["sleep","1"]}}`
}

func TestRewrite(t *testing.T) {
	in := spec("container", "/kubepods/besteffort/pod99afd520-5b3e-4c8d-8471-4b6c8ee26b4c/"+id)
	out, literal, err := Rewrite([]byte(in), Options{})
	if err != nil || !literal {
		t.Fatalf("Rewrite: %v, literal %v", err, literal)
	}
	want := spec("container", "/kubepods-besteffort-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice:cri-containerd:"+id)
	var a, b any
	if json.Unmarshal(out, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		t.Fatalf("not JSON: %s", out)
	}
	if ja, jb := mustJSON(a), mustJSON(b); ja != jb {
		t.Errorf("Rewrite:\n got %s\nwant %s", ja, jb)
	}
	if !strings.Contains(string(out), "9223372036854775807") {
		t.Errorf("the memory limit lost its digits: %s", out)
	}
	// The sandbox and a config not from CRI stay as they are.
	for _, doc := range []string{spec("sandbox", "/kubepods/besteffort/pod99afd520-5b3e-4c8d-8471-4b6c8ee26b4c/"+id), `{"linux":{"cgroupsPath":"/x"}}`} {
		out, literal, err := Rewrite([]byte(doc), Options{})
		if err != nil || literal || string(out) != doc {
			t.Errorf("Rewrite(%s) = %s, %v, %v; want it unchanged", doc, out, literal, err)
		}
	}
	// A path cgwarden's NRI plugin set (its annotation names it) is kept;
	// an annotation naming another path is not enough.
	placed := "/kubepods/besteffort/pod99afd520-5b3e-4c8d-8471-4b6c8ee26b4c/" + id
	for ann, keep := range map[string]bool{placed: true, "/elsewhere": false} {
		var doc map[string]any
		if err := json.Unmarshal([]byte(spec("container", placed)), &doc); err != nil {
			t.Fatal(err)
		}
		doc["annotations"].(map[string]any)[nriPlaced] = ann
		in := mustJSON(doc)
		out, literal, err := Rewrite([]byte(in), Options{})
		if changed := out != nil && string(out) != in; err != nil || !literal || changed == keep {
			t.Errorf("annotation %q: changed %v, literal %v, err %v; want kept %v (and literal)", ann, changed, literal, err, keep)
		}
	}
	// A sandbox of a pod annotated to misplace it is misplaced too;
	// another value of the annotation is not enough.
	for val, moved := range map[string]bool{"true": true, "false": false, "": false} {
		var doc map[string]any
		if err := json.Unmarshal([]byte(spec("sandbox", "/kubepods/besteffort/pod99afd520-5b3e-4c8d-8471-4b6c8ee26b4c/"+id)), &doc); err != nil {
			t.Fatal(err)
		}
		doc["annotations"].(map[string]any)[MisplaceSandbox] = val
		in := mustJSON(doc)
		out, literal, err := Rewrite([]byte(in), Options{})
		if changed := string(out) != in; err != nil || changed != moved || literal != moved {
			t.Errorf("sandbox with %s=%q: changed %v, err %v; want changed %v", MisplaceSandbox, val, changed, err, moved)
		}
		if moved && !strings.Contains(string(out), `"/kubepods-besteffort-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice:cri-containerd:`+id+`"`) {
			t.Errorf("misplaced sandbox: %s", out)
		}
	}
	if _, _, err := Rewrite([]byte(spec("container", "/elsewhere")), Options{}); err == nil || !strings.Contains(err.Error(), "/elsewhere") {
		t.Errorf("an unknown cgroupsPath: %v, want an error naming it", err)
	}
	if _, _, err := Rewrite([]byte("{"), Options{}); err == nil {
		t.Error("a broken config.json: no error")
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The wrapper rewrites the bundle, then runs the real runc with the very
// same arguments; a command that is not create passes through untouched.
func TestExecsRuncWithTheSameArguments(t *testing.T) {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	if err := os.Mkdir(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(bundle, "config.json")
	if err := os.WriteFile(cfg, []byte(spec("container", "/kubepods/burstable/pod99afd520-5b3e-4c8d-8471-4b6c8ee26b4c/"+id)), 0o600); err != nil {
		t.Fatal(err)
	}
	seen := filepath.Join(dir, "seen")
	fake := filepath.Join(dir, "runc")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"$*\" >>"+seen+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "MISPLACE_TEST_MAIN=1", "CGWARDEN_MISPLACE_RUNC="+fake)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v: %s", args, err, out)
		}
		return string(out)
	}
	run("--root", "/r", "--log-format", "json", "create", "--bundle", bundle, "--pid-file", "p", "abc")
	run("--root", "/r", "delete", "abc")
	got, _ := os.ReadFile(seen)
	want := "--root /r --log-format json create --bundle " + bundle + " --pid-file p abc\n--root /r delete abc\n"
	if string(got) != want {
		t.Errorf("runc was run as\n%s\nwant\n%s", got, want)
	}
	doc, _ := os.ReadFile(cfg)
	if !strings.Contains(string(doc), `"cgroupsPath":"/kubepods-burstable-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice:cri-containerd:`+id+`"`) {
		t.Errorf("config.json after create: %s", doc)
	}
	if st, _ := os.Stat(cfg); st.Mode().Perm() != 0o600 {
		t.Errorf("config.json mode %v, want 0600 kept", st.Mode().Perm())
	}
	// An unknown shape fails the create, and runc is not run.
	if err := os.WriteFile(cfg, []byte(spec("container", "/somewhere/else")), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "create", "--bundle", bundle, "abc")
	cmd.Env = append(os.Environ(), "MISPLACE_TEST_MAIN=1", "CGWARDEN_MISPLACE_RUNC="+fake)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "/somewhere/else") {
		t.Errorf("an unknown cgroupsPath: %v: %s; want a failure naming it", err, out)
	}
	if got2, _ := os.ReadFile(seen); string(got2) != want {
		t.Errorf("runc ran after a failed rewrite: %s", got2)
	}
}

// With SelectEnv=annotated only the pods annotated Misplace=true are
// misplaced; the others pass through as they came, so the wrapper can be a
// node's default handler.
func TestRewriteAnnotatedOnly(t *testing.T) {
	const sys = "kubepods-besteffort-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice:cri-containerd:" + id
	for val, moved := range map[string]bool{"true": true, "false": false, "": false, "absent": false} {
		var doc map[string]any
		if err := json.Unmarshal([]byte(spec("container", sys)), &doc); err != nil {
			t.Fatal(err)
		}
		if val != "absent" {
			doc["annotations"].(map[string]any)[Misplace] = val
		}
		in := mustJSON(doc)
		out, literal, err := Rewrite([]byte(in), Options{AnnotatedOnly: true})
		if changed := string(out) != in; err != nil || changed != moved || literal != moved {
			t.Errorf("%s=%q: changed %v, literal %v, err %v; want %v", Misplace, val, changed, literal, err, moved)
		}
		if moved && !strings.Contains(string(out), `"cgroupsPath":"/`+sys+`"`) {
			t.Errorf("%s=%q: %s; want the systemd name as one literal directory at the root", Misplace, val, out)
		}
		// Without the selection every app container is misplaced.
		if _, literal, err := Rewrite([]byte(in), Options{}); err != nil || !literal {
			t.Errorf("%s=%q without selection: literal %v, err %v", Misplace, val, literal, err)
		}
	}
}

func TestOptionsFromEnv(t *testing.T) {
	for v, want := range map[string]Options{"": {}, "annotated": {AnnotatedOnly: true}} {
		t.Setenv(SelectEnv, v)
		if got, err := OptionsFromEnv(); err != nil || got != want {
			t.Errorf("%s=%q: %+v, %v; want %+v", SelectEnv, v, got, err, want)
		}
	}
	t.Setenv(SelectEnv, "annotate")
	if _, err := OptionsFromEnv(); err == nil || !strings.Contains(err.Error(), `"annotate"`) {
		t.Errorf("a misspelt selection: %v, want an error naming it", err)
	}
}

func TestWithoutSystemd(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"--root", "/r", "--systemd-cgroup", "create", "--bundle", "/b", "x"}, []string{"--root", "/r", "create", "--bundle", "/b", "x"}},
		{[]string{"--systemd-cgroup=true", "run", "x"}, []string{"run", "x"}},
		// A global flag's value is not the flag, and the command's own
		// arguments are not looked at.
		{[]string{"--root", "--systemd-cgroup", "create", "--systemd-cgroup"}, []string{"--root", "--systemd-cgroup", "create", "--systemd-cgroup"}},
		{[]string{"--log", "/l", "create", "x"}, []string{"--log", "/l", "create", "x"}},
	} {
		if got := withoutSystemd(c.in); strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("withoutSystemd(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// On a systemd node the create of a selected container runs runc without
// --systemd-cgroup and with systemd's name as the literal path; a
// container not selected, and every later command, keep their arguments.
func TestExecsRuncWithoutSystemdForWhatItMisplaces(t *testing.T) {
	dir := t.TempDir()
	seen := filepath.Join(dir, "seen")
	fake := filepath.Join(dir, "runc")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"$*\" >>"+seen+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const sys = "kubepods-besteffort-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice:cri-containerd:" + id
	bundle := func(name string, selected bool) string {
		b := filepath.Join(dir, name)
		var doc map[string]any
		if err := json.Unmarshal([]byte(spec("container", sys)), &doc); err != nil {
			t.Fatal(err)
		}
		if selected {
			doc["annotations"].(map[string]any)[Misplace] = "true"
		}
		if err := os.Mkdir(b, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(b, "config.json"), []byte(mustJSON(doc)), 0o600); err != nil {
			t.Fatal(err)
		}
		return b
	}
	sel, other := bundle("selected", true), bundle("other", false)
	for _, args := range [][]string{
		{"--root", "/r", "--systemd-cgroup", "create", "--bundle", sel, "a"},
		{"--root", "/r", "--systemd-cgroup", "create", "--bundle", other, "b"},
		{"--root", "/r", "--systemd-cgroup", "delete", "a"},
	} {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "MISPLACE_TEST_MAIN=1", "CGWARDEN_MISPLACE_RUNC="+fake, SelectEnv+"=annotated")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%q: %v: %s", args, err, out)
		}
	}
	got, _ := os.ReadFile(seen)
	want := "--root /r create --bundle " + sel + " a\n" +
		"--root /r --systemd-cgroup create --bundle " + other + " b\n" +
		"--root /r --systemd-cgroup delete a\n"
	if string(got) != want {
		t.Errorf("runc was run as\n%s\nwant\n%s", got, want)
	}
	if doc, _ := os.ReadFile(filepath.Join(sel, "config.json")); !strings.Contains(string(doc), `"cgroupsPath":"/`+sys+`"`) {
		t.Errorf("the selected container's config.json: %s", doc)
	}
	if doc, _ := os.ReadFile(filepath.Join(other, "config.json")); !strings.Contains(string(doc), `"cgroupsPath":"`+sys+`"`) {
		t.Errorf("the other container's config.json changed: %s", doc)
	}
}
