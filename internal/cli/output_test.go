package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const seed003 = "../examples/snapshots/seed-003-k3s-spin"

// The extra formats and selections, kept as goldens: -o wide (names
// whole, memory limit and throttling), -o yaml (the JSON's fields),
// --no-headers with a namespace and a sort, and audit -o yaml.
func TestOutputGolden(t *testing.T) {
	t.Setenv("COLUMNS", "120")
	for _, c := range []struct {
		file string
		args []string
		code int
	}{
		{"inspect-seed-003-k3s-spin-pods-wide.txt", []string{"inspect", "--snapshot", "example:seed-003-k3s-spin", "--pods", seed003 + ".pods.json", "-o", "wide"}, 0},
		{"inspect-seed-003-k3s-spin-pods.yaml", []string{"inspect", "--snapshot", "example:seed-003-k3s-spin", "--pods", seed003 + ".pods.json", "-o", "yaml"}, 0},
		{"inspect-seed-000-kube-system-by-cpu.txt", []string{"inspect", "--snapshot", "example:seed-000-eks-neonvm", "--pods", seed000 + ".pods.json", "-n", "kube-system", "--sort-by", "cpu", "--no-headers"}, 0},
		{"audit-seed-003.yaml", []string{"audit", "--snapshot", "example:seed-003-k3s-spin", "-o", "yaml"}, 1},
	} {
		t.Run(c.file, func(t *testing.T) {
			out, errs, code := run(c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d: %s", code, c.code, errs)
			}
			golden(t, c.file, []byte(out))
		})
	}
}

// Issue 16 item 6: the table people read.
func TestInspectTable(t *testing.T) {
	t.Setenv("COLUMNS", "120")
	for _, name := range inspectExamples {
		out, _, _ := run("inspect", "--snapshot", "example:"+name, "--pods", "../examples/snapshots/"+name+".pods.json")
		for i, l := range strings.Split(out, "\n") {
			if strings.TrimRight(l, " ") != l {
				t.Errorf("%s line %d has trailing spaces: %q", name, i+1, l)
			}
			if strings.Contains(l, "e-0") || strings.Contains(l, "e+0") {
				t.Errorf("%s line %d has a number in e-notation: %q", name, i+1, l)
			}
		}
		// One header names the weight file: cpu.shares on v1, cpu.weight on v2.
		head := "SHARES"
		if strings.Contains(out, "cgroup v2") {
			head = "WEIGHT"
		}
		if !strings.Contains(out, "POD") || !strings.Contains(out, "  "+head+"  ") {
			t.Errorf("%s: no %s header:\n%s", name, head, out)
		}
	}

	out, _, _ := run("inspect", "--snapshot", "example:seed-003-k3s-spin", "--pods", seed003+".pods.json")
	lines := strings.Split(out, "\n")
	// Units under the headers.
	if len(lines) < 4 || strings.Fields(lines[3])[0] != "cores" || !strings.HasSuffix(lines[3], "MiB") {
		t.Errorf("no line of units under the headers: %q", lines[3])
	}
	// One format per column: GUARANTEED has four decimals on every row.
	for _, l := range lines[4:] {
		if !strings.Contains(l, "─") && !strings.HasPrefix(l, "/") {
			continue
		}
		f := strings.Fields(strings.ReplaceAll(l, "*", ""))
		g := f[len(f)-3]
		if dot := strings.IndexByte(g, '.'); dot < 0 || len(g)-dot-1 != 4 {
			t.Errorf("GUARANTEED %q has not 4 decimals: %q", g, l)
		}
	}
	// The quota caps the busy pod (guaranteed 2.81 cores by weight,
	// quota 0.50): the smaller shows, marked, and a footnote says why.
	var pod string
	for _, l := range lines {
		if strings.Contains(l, "pod/guaranteed") {
			pod = l
		}
	}
	if !strings.Contains(pod, " 0.5000*") || !strings.Contains(out, "\n* capped: the CPU quota") {
		t.Errorf("the quota-capped pod is not marked and explained:\n%s", out)
	}
	// Names fit the 120 columns as far as they can: cut in the middle.
	if !strings.Contains(out, "kubepods-bur…af2a9.slice") {
		t.Errorf("a long cgroup name is not cut in the middle at 120 columns:\n%s", out)
	}

	// -o wide keeps names whole, whatever the width; the misplaced
	// container appears once, under its pod, with its real path.
	wide, _, _ := run("inspect", "--snapshot", "example:seed-003-k3s-spin", "--pods", seed003+".pods.json", "-o", "wide")
	if !strings.Contains(wide, "kubepods-burstable-pod79c5176e2321b3741f55aee0036af2a9.slice") || !strings.Contains(wide, "MEM LIMIT") {
		t.Errorf("-o wide shortens names or lacks its columns:\n%s", wide)
	}
	if n := strings.Count(wide, ":cri-containerd:c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00"); n != 1 {
		t.Errorf("the misplaced cgroup appears %d times, want once:\n%s", n, wide)
	}

	// Sandbox containers (pause: a pod's cgroup the metadata names no
	// container for) are marked as such.
	out, _, _ = run("inspect", "--snapshot", "example:seed-000-eks-neonvm", "--pods", seed000+".pods.json", "--pod", "netshoot-7c9d4b8f5-q8r2n")
	if strings.Count(out, " sandbox ") != 1 || strings.Count(out, " container ") != 1 {
		t.Errorf("netshoot's pause container is not marked sandbox:\n%s", out)
	}
}

// Issue 16 item 7: selections and sorting, on inspect and audit.
func TestSelectAndSort(t *testing.T) {
	pods := func(args ...string) []string {
		t.Helper()
		out, errs, code := run(append([]string{"inspect", "--snapshot", "example:seed-000-eks-neonvm", "--pods", seed000 + ".pods.json", "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		var r struct {
			Pods []struct {
				Name, Namespace string
				CPU             struct{ UsageCores *float64 }
			}
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range r.Pods {
			names = append(names, p.Namespace+"/"+p.Name+"="+strconv.FormatFloat(*p.CPU.UsageCores, 'f', -1, 64))
		}
		return names
	}
	all := pods()
	ks := pods("-n", "kube-system")
	if len(ks) == 0 || len(ks) >= len(all) {
		t.Fatalf("-n kube-system: %d of %d pods", len(ks), len(all))
	}
	for _, p := range ks {
		if !strings.HasPrefix(p, "kube-system/") {
			t.Errorf("-n kube-system shows %s", p)
		}
	}
	if got := pods("--pod", "netshoot-7c9d4b8f5-q8r2n,kube-proxy-7d7d4"); len(got) != 2 {
		t.Errorf("--pod with two names: %v", got)
	}
	if got := pods("-l", "vm.neon.tech/runner=true"); len(got) != 3 {
		t.Errorf("-l vm.neon.tech/runner=true: %v, want the 3 VM runners", got)
	}
	if got := pods("-A"); len(got) != len(all) {
		t.Errorf("-A: %d pods, want %d", len(got), len(all))
	}
	// --sort-by cpu: the most used first.
	prev := -1.0
	for i, p := range pods("--sort-by", "cpu") {
		v, _ := strconv.ParseFloat(p[strings.LastIndexByte(p, '=')+1:], 64)
		if i > 0 && v > prev {
			t.Errorf("--sort-by cpu: %s after %v", p, prev)
		}
		prev = v
	}
	for _, bad := range [][]string{{"-n", "x", "-A"}, {"--sort-by", "age"}, {"-l", "a in (b"}, {"-o", "xml"}} {
		if _, _, code := run(append([]string{"inspect", "--snapshot", "example:seed-003-k3s-spin"}, bad...)...); code != 2 {
			t.Errorf("inspect %v: exit %d, want 2", bad, code)
		}
	}

	// audit: the findings about the selected pods only, counted.
	var r struct {
		Counts   map[string]int
		Findings []struct{ Subject map[string]string }
	}
	out, errs, code := run("audit", "--snapshot", "example:seed-000-eks-neonvm", "--pods", seed000+".pods.json", "--vms", seed000+".vms.json", "-o", "json", "-l", "vm.neon.tech/runner=true")
	if code > 1 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Findings) == 0 || r.Counts["error"]+r.Counts["warning"]+r.Counts["info"] != len(r.Findings) {
		t.Fatalf("audit -l: %d findings, counts %v", len(r.Findings), r.Counts)
	}
	for _, f := range r.Findings {
		if !strings.HasPrefix(f.Subject["podName"], "compute-") {
			t.Errorf("audit -l vm.neon.tech/runner=true reports %v", f.Subject)
		}
	}
}

// The selector needs labels: without pod metadata it says so.
func TestSelectorWithoutMetadata(t *testing.T) {
	_, errs, _ := run("inspect", "--snapshot", "example:seed-003-k3s-spin", "-l", "app=x")
	if !strings.Contains(errs, "no pod metadata, so no pod has labels") {
		t.Errorf("stderr %q", errs)
	}
}

// Issue 16 item 8: auto finds no source quickly when there is none: no
// socket under the host root, no kubeconfig, not in a cluster.
func TestMetadataAutoNothingThere(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", dir)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	o := &Options{HostRoot: dir, Meta: MetaFlags{Mode: "auto"}, stderr: &strings.Builder{}}
	start := time.Now()
	meta, err := o.podMetadata()
	if err != nil || meta != nil {
		t.Fatalf("auto with nothing there: %v, %v", meta, err)
	}
	if d := time.Since(start); d.Seconds() > 2 {
		t.Errorf("auto with nothing there took %s", d)
	}
	if !strings.Contains(o.metaMissing, "pods are shown by UID") {
		t.Errorf("auto with nothing there does not say why pods have no names: %q", o.metaMissing)
	}
}

// auto takes names from the CRI runtime when its socket is under the
// host root; --metadata cri names a snapshot's pods too.
func TestMetadataFromCRI(t *testing.T) {
	root := t.TempDir()
	sock := filepath.Join(root, "run", "containerd", "containerd.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	startFakeCRI(t, sock)
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", root)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	o := &Options{HostRoot: root, Meta: MetaFlags{Mode: "auto"}, stderr: &strings.Builder{}}
	meta, err := o.podMetadata()
	if err != nil || meta == nil {
		t.Fatalf("auto with a CRI socket: %v, %v", meta, err)
	}
	if p, ok := meta.Pod("99afd520-5b3e-4c8d-8471-4b6c8ee26b4c"); !ok || p.Name != "spin-test-runwasi-6b8d9c7f54-m2xq8" {
		t.Errorf("pod from CRI: %+v", p)
	}

	out, errs, code := run("inspect", "--snapshot", "example:seed-003-k3s-spin", "--metadata", "cri", "--cri-socket", sock)
	if code != 0 || !strings.Contains(out, "default/spin-test-runwasi-6b8d9c7f54-m2xq8") || !strings.Contains(errs, "the CRI runtime: 1 of its 1 pods are on this node") {
		t.Errorf("inspect --metadata cri: exit %d\n%s\nstderr: %s", code, out, errs)
	}
	// An explicit source that does not answer is an error, not a silent
	// view by UID.
	if _, errs, code := run("inspect", "--snapshot", "example:seed-003-k3s-spin", "--metadata", "cri", "--cri-socket", filepath.Join(root, "none.sock")); code != 2 {
		t.Errorf("--metadata cri without a runtime: exit %d (%s)", code, errs)
	}
}

// The progress line is written on a terminal only.
func TestProgressOnlyOnATerminal(t *testing.T) {
	var b strings.Builder
	o := &Options{stderr: &b}
	o.progress("measuring CPU").wait(10 * time.Millisecond)
	if b.Len() != 0 {
		t.Errorf("progress on a non-terminal: %q", b.String())
	}
	p := &progress{w: &b, what: "measuring CPU"}
	p.wait(1500 * time.Millisecond)
	if got := b.String(); !strings.HasPrefix(got, "\r\x1b[Kcgwarden: measuring CPU, 2s left…\r\x1b[Kcgwarden: measuring CPU, 1s left…") || !strings.HasSuffix(got, "\r\x1b[K") {
		t.Errorf("progress line %q", got)
	}
}
