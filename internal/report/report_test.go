package report_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/cli"
	"github.com/cgwarden/cgwarden/internal/demo"
	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/report"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// examplePage renders the report of an embedded example snapshot with
// its pods and VMs files, as `cgwarden report --snapshot example:NAME`
// does.
func examplePage(t *testing.T, name string) []byte {
	t.Helper()
	s, err := cli.LoadSnapshot(examples.Prefix + name)
	if err != nil {
		t.Fatal(err)
	}
	dir := "../examples/snapshots/"
	var meta *metadata.Set
	if _, err := os.Stat(dir + name + ".pods.json"); err == nil {
		if meta, err = cli.LoadPods(dir + name + ".pods.json"); err != nil {
			t.Fatal(err)
		}
		if f, err := os.Open(dir + name + ".vms.json"); err == nil {
			vms, err := metadata.ParseVMs(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			meta.ApplyVMs(vms)
		}
	}
	n, err := (&inventory.Sampling{Meta: meta}).TakeAll(s.Samples)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := report.Write(&b, report.Build("cgwarden report", "snapshot "+name, n, meta, *audit.Run(&audit.Input{Node: n, Meta: meta}))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// demoResult is a demo run's result as its JSON gives it (figures from a
// real run on a cgroup v1 host, rounded), without the scans of its
// scratch: the demo part of a report on its own.
func demoResult() *demo.Result {
	vm := func(name string, size, cores, share float64, w uint64) demo.VMFigure {
		return demo.VMFigure{Name: name, SizeCores: size, Cores: cores, ShareOfVMs: share, ShareBySize: size / 7, ShareEqual: 1.0 / 3,
			PerSize: share / (size / 7), PerEqual: share * 3, PodWeight: w}
	}
	return &demo.Result{Scratch: "/cgwarden-demo-0123abcd", CgroupVersion: "v1", CPUs: 2, Seeds: []string{"000", "003"}, PhaseSeconds: 5,
		Phases: []demo.Phase{
			{Name: demo.PhaseBefore, Seconds: 5, Seed000: &demo.Split{VMs: []demo.VMFigure{vm("vm-1-cpu", 1, 0.001, 0.34, 2), vm("vm-2-cpu", 2, 0.001, 0.33, 2), vm("vm-4-cpu", 4, 0.001, 0.33, 2)},
				BurstableCores: 0.988, VMShare: 0.004, PromisedVMShare: 0.0039, TierWeight: 2, BurstableTierWeight: 512},
				Seed003: &demo.Placement{PodCores: 0, ContainerCores: 0.97, Misplaced: true, MisplacedProcs: 2}},
			{Name: demo.PhasePaused, Seconds: 5, BurstablePaused: true, Seed000: &demo.Split{VMs: []demo.VMFigure{vm("vm-1-cpu", 1, 0.324, 0.334, 2), vm("vm-2-cpu", 2, 0.324, 0.334, 2), vm("vm-4-cpu", 4, 0.323, 0.333, 2)},
				VMShare: 1, PromisedVMShare: 1, TierWeight: 2, BurstableTierWeight: 512}},
			{Name: demo.PhaseAfter, Seconds: 5, Seed000: &demo.Split{VMs: []demo.VMFigure{vm("vm-1-cpu", 1, 0.132, 0.142, 1024), vm("vm-2-cpu", 2, 0.266, 0.286, 2048), vm("vm-4-cpu", 4, 0.532, 0.572, 4096)},
				BurstableCores: 0.067, VMShare: 0.933, PromisedVMShare: 0.933, TierWeight: 7170, BurstableTierWeight: 512},
				Seed003: &demo.Placement{PodCores: 0.899, ContainerCores: 0.899, MisplacedProcs: 0}},
		},
		FindingsBefore: []audit.Finding{{Rule: "misplaced-container", Severity: audit.Error, Subject: audit.Subject{Kind: "pod", PodName: "spin-app", Namespace: "demo"},
			Evidence: audit.Evidence{Summary: "container outside its pod"}, Message: "the kubelet reads 0 for the pod", Remedy: "cgwarden fix --apply"}},
		Fix:     []demo.FixStep{{Rule: "misplaced-container", Description: "move the container's processes under the pod"}},
		Revert:  demo.RevertSummary{Undone: 17},
		Removed: true,
	}
}

// pages are the pages the tests look at: every example snapshot's report
// and a demo report.
func pages(t *testing.T) map[string][]byte {
	out := map[string][]byte{}
	for _, name := range examples.Names() {
		out[name] = examplePage(t, name)
	}
	var b bytes.Buffer
	if err := report.Write(&b, report.FromDemo(demoResult())); err != nil {
		t.Fatal(err)
	}
	out["demo"] = b.Bytes()
	return out
}

// TestGolden compares the demo page with testdata/golden/demo.html
// (-update rewrites it). The example snapshots' pages are golden files of
// the command that writes them (internal/cli, TestReportHTMLGolden).
func TestGolden(t *testing.T) {
	for name, got := range pages(t) {
		if name != "demo" {
			continue
		}
		p := filepath.Join("testdata", "golden", name+".html")
		if *update {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%v (run go test ./internal/report -run TestGolden -update to create it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the golden file; if the change is intended, rerun with -update and review the diff", p)
		}
	}
}

var (
	svgRE    = regexp.MustCompile(`(?s)<svg\b[^>]*>.*?</svg>`)
	svgOpen  = regexp.MustCompile(`<svg\b[^>]*>`)
	urlRE    = regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	idRefRE  = regexp.MustCompile(`aria-labelledby="([^"]+)"`)
	externRE = regexp.MustCompile(`(?i)<script\b|<link\b|<iframe\b|<img\b|@import|url\(|src=`)
)

// TestSelfContainedAndAccessible: no page loads anything (no URL, no
// script, link, image or CSS url()); every chart is an image with a
// <title> and a <desc> it is labelled by, and is followed by a table of
// its figures; the demo page has its before/after table and bars.
func TestSelfContainedAndAccessible(t *testing.T) {
	for name, b := range pages(t) {
		s := string(b)
		if m := urlRE.FindString(s); m != "" {
			t.Errorf("%s references a URL: %q", name, m)
		}
		if m := externRE.FindString(s); m != "" {
			t.Errorf("%s loads something: %q", name, m)
		}
		svgs := svgRE.FindAllString(s, -1)
		if len(svgs) == 0 {
			t.Errorf("%s has no chart", name)
		}
		for _, svg := range svgs {
			open := svgOpen.FindString(svg)
			if !strings.Contains(open, `role="img"`) {
				t.Errorf("%s: chart %q is not role=img", name, open)
			}
			ids := idRefRE.FindStringSubmatch(open)
			if ids == nil {
				t.Errorf("%s: chart %q is not labelled", name, open)
				continue
			}
			for _, id := range strings.Fields(ids[1]) {
				if !regexp.MustCompile(`<(title|desc) id="` + regexp.QuoteMeta(id) + `">[^<]{10,}</(title|desc)>`).MatchString(svg) {
					t.Errorf("%s: chart %q has no <title>/<desc> with id %s and text", name, open, id)
				}
			}
			after := s[strings.Index(s, svg)+len(svg):]
			if i := strings.Index(after, "<table"); i < 0 || i > 200 {
				t.Errorf("%s: chart %q is not followed by a table of its figures", name, open)
			}
		}
		if !strings.Contains(s, `<meta name="viewport" content="width=device-width, initial-scale=1">`) {
			t.Errorf("%s: no viewport meta (phones would zoom out)", name)
		}
	}
	d := string(pages(t)["demo"])
	for _, want := range []string{"Before and after the fix", "demo-vm-split", "demo-vm-share", "demo-placement", "93.3%", "0.899"} {
		if !strings.Contains(d, want) {
			t.Errorf("demo page lacks %q", want)
		}
	}
}
