package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/rules"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestValidate(t *testing.T) {
	ok := map[string][]string{
		"cpu.shares":                      {"2", "1024", "262144"},
		"cpu.weight":                      {"1", "100", "10000"},
		"cpu.cfs_period_us":               {"1000", "100000", "1000000"},
		"cpu.cfs_quota_us":                {"-1", "1000", "150000"},
		"cpu.max":                         {"max", "max 100000", "50000 100000", "1000"},
		"memory.limit_in_bytes":           {"-1", "536870912", "9223372036854771712"},
		"memory.max":                      {"max", "0", "600000000"},
		"pids.max":                        {"max", "0", "100"},
		"memory.move_charge_at_immigrate": {"0", "3"},
		"cgroup.subtree_control":          {"+cpu", "+cpu +memory +pids", "-io +cpu"},
		"cgroup.procs":                    {"1", "4194304"},
	}
	bad := map[string][]string{
		"cpu.shares":                      {"1", "262145", "", "1024x", "-2"},
		"cpu.weight":                      {"0", "10001", "max"},
		"cpu.cfs_period_us":               {"999", "1000001", "-1"},
		"cpu.cfs_quota_us":                {"999", "0", "-2", "max"},
		"cpu.max":                         {"", "max 999", "999 100000", "1 2 3", "50000 max"},
		"memory.limit_in_bytes":           {"0", "-2", "max", "9223372036854775808"},
		"memory.max":                      {"-1", "1G"},
		"pids.max":                        {"-1", "4194305"},
		"memory.move_charge_at_immigrate": {"4", "-1"},
		"cgroup.subtree_control":          {"", "cpu", "+cpu;", "+bogus", "+"},
		"cgroup.procs":                    {"0", "-1", "1 2"},
		"release_agent":                   {"/bin/sh"},
		"cgroup.kill":                     {"1"},
	}
	for file, vs := range ok {
		for _, v := range vs {
			if err := Validate(file, v); err != nil {
				t.Errorf("Validate(%s, %q) = %v, want ok", file, v, err)
			}
		}
	}
	for file, vs := range bad {
		for _, v := range vs {
			var ve *ValueError
			if err := Validate(file, v); !errors.As(err, &ve) {
				t.Errorf("Validate(%s, %q) = %v, want a ValueError", file, v, err)
			}
		}
	}
}

func TestControlUndo(t *testing.T) {
	for _, c := range []struct{ prev, cur, want string }{
		{"", "cpu memory pids", "-cpu -memory -pids"},
		{"memory", "cpu memory pids", "-cpu -pids"},
		{"cpu memory", "cpu memory", ""},
		{"cpu io", "cpu", "+io"},
	} {
		if got := ControlUndo(c.prev, c.cur); got != c.want {
			t.Errorf("ControlUndo(%q, %q) = %q, want %q", c.prev, c.cur, got, c.want)
		}
	}
}

func TestPolicyRefuses(t *testing.T) {
	pol := Policy{
		Trees:   []string{"/sys/fs/cgroup/kubepods.slice"},
		Owned:   []string{"/sys/fs/cgroup/kubepods.slice/pod.slice/new.scope"},
		Sources: []string{"/sys/fs/cgroup/literal"},
	}
	allowed := []Op{
		{Kind: Mkdir, Path: "/sys/fs/cgroup/kubepods.slice/pod.slice/new.scope"},
		{Kind: Write, Path: "/sys/fs/cgroup/kubepods.slice/pod.slice/new.scope/cpu.weight", Value: "100"},
		{Kind: Write, Path: "/sys/fs/cgroup/kubepods.slice/pod.slice/cgroup.subtree_control", Value: "+cpu"},
		{Kind: Move, Pairs: []Pair{{Source: "/sys/fs/cgroup/literal", Target: "/sys/fs/cgroup/kubepods.slice/pod.slice/new.scope"}}},
		{Kind: Rmdir, Path: "/sys/fs/cgroup/kubepods.slice/pod.slice/new.scope"},
	}
	if err := pol.CheckAll(allowed); err != nil {
		t.Fatalf("policy refused a plan it should allow: %v", err)
	}
	refused := map[string]Op{
		"mkdir outside the tree":       {Kind: Mkdir, Path: "/sys/fs/cgroup/evil"},
		"mkdir not planned":            {Kind: Mkdir, Path: "/sys/fs/cgroup/kubepods.slice/other"},
		"mkdir the tree root":          {Kind: Mkdir, Path: "/sys/fs/cgroup/kubepods.slice"},
		"write above the tree":         {Kind: Write, Path: "/sys/fs/cgroup/cpu.weight", Value: "100"},
		"write to the source":          {Kind: Write, Path: "/sys/fs/cgroup/literal/cpu.weight", Value: "100"},
		"write a file never written":   {Kind: Write, Path: "/sys/fs/cgroup/kubepods.slice/release_agent", Value: "/x"},
		"write out of range":           {Kind: Write, Path: "/sys/fs/cgroup/kubepods.slice/pod.slice/new.scope/cpu.weight", Value: "0"},
		"write procs directly":         {Kind: Write, Path: "/sys/fs/cgroup/kubepods.slice/pod.slice/new.scope/cgroup.procs", Value: "1"},
		"move into a cgroup not owned": {Kind: Move, Pairs: []Pair{{Source: "/sys/fs/cgroup/literal", Target: "/sys/fs/cgroup/kubepods.slice/pod.slice"}}},
		"move from an unnamed source":  {Kind: Move, Pairs: []Pair{{Source: "/sys/fs/cgroup/system.slice", Target: "/sys/fs/cgroup/kubepods.slice/pod.slice/new.scope"}}},
		"remove the source unasked":    {Kind: Rmdir, Path: "/sys/fs/cgroup/literal"},
		"remove a kubelet cgroup":      {Kind: Rmdir, Path: "/sys/fs/cgroup/kubepods.slice/pod.slice"},
		"owned but outside the tree":   {Kind: Mkdir, Path: "/sys/fs/cgroup/kubepods.slice-not/x"},
		"write a kubelet cgroup":       {Kind: Write, Path: "/sys/fs/cgroup/kubepods.slice/pod.slice/cpu.weight", Value: "100"},
		"enable controllers elsewhere": {Kind: Write, Path: "/sys/fs/cgroup/kubepods.slice/cgroup.subtree_control", Value: "+cpu"},
	}
	for name, op := range refused {
		err := pol.Check(op)
		var ve *ValueError
		if !errors.Is(err, ErrPolicy) && !errors.As(err, &ve) {
			t.Errorf("%s: Check = %v, want a refusal", name, err)
		}
	}
	pol.RemoveSources = true
	if err := pol.Check(Op{Kind: Rmdir, Path: "/sys/fs/cgroup/literal"}); err != nil {
		t.Errorf("removing a named source with RemoveSources: %v", err)
	}
}

// seed003 loads the embedded seed-003 snapshot (k3s, cgroup v2, systemd:
// the empty pod slice and the busy literal directory at the root).
// seed003 scans the seed-003 snapshot with the seed's pods file, whose
// pod lists the misplaced container's ID: the metadata confirms it.
func seed003(t *testing.T) (*inventory.Node, *inventory.Scanner) {
	t.Helper()
	pods, err := metadata.ReadPodsFile("../examples/snapshots/seed-003-k3s-spin.pods.json")
	if err != nil {
		t.Fatal(err)
	}
	return seed003With(t, metadata.NewSet(pods))
}

// seed003With scans the seed-003 snapshot with meta (nil: none).
func seed003With(t *testing.T, meta *metadata.Set) (*inventory.Node, *inventory.Scanner) {
	t.Helper()
	return scanExample(t, "seed-003-k3s-spin", meta)
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	file := path.Join("testdata", name)
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", file, got, want)
	}
}

func TestAdoptSeed003Golden(t *testing.T) {
	n, sc := seed003(t)
	p, pol, err := Adopt(Input{Node: n, Places: sc.Places, FS: sc.FS})
	if err != nil {
		t.Fatal(err)
	}
	if err := pol.CheckAll(p.Ops); err != nil {
		t.Fatalf("the plan breaks its own policy: %v", err)
	}
	var text bytes.Buffer
	if err := WriteText(&text, p); err != nil {
		t.Fatal(err)
	}
	js, err := json.MarshalIndent(p, "", "  ") // as fix writes it
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "adopt-seed-003.txt", text.Bytes())
	golden(t, "adopt-seed-003.json", append(js, '\n'))
	if !slices.Contains(p.Notes, NoteV2Charges) {
		t.Error("a v2 plan that moves processes does not say that charges stay")
	}
}

// fsOver shows extra directories on top of a snapshot.
type fsOver struct {
	inventory.Scanner
	extra map[string][]string
	procs map[string]string
}

func (f fsOver) ReadFile(p string) ([]byte, error) {
	if v, ok := f.procs[p]; ok {
		return []byte(v), nil
	}
	return f.FS.ReadFile(p)
}

func (f fsOver) ReadDirs(p string) ([]string, error) {
	d, err := f.FS.ReadDirs(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return d, err
	}
	return append(d, f.extra[p]...), nil
}

func TestAdoptSkips(t *testing.T) {
	n, sc := seed003(t)
	pod := "/sys/fs/cgroup/kubepods.slice/kubepods-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice"
	target := pod + "/cri-containerd-c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00.scope"
	exists := fsOver{Scanner: *sc, extra: map[string][]string{pod: {path.Base(target)}}}

	// A target that exists but is not cgwarden's: not touched.
	p, _, err := Adopt(Input{Node: n, Places: sc.Places, FS: exists})
	if err != nil || len(p.Ops) != 0 || len(p.Skipped) != 1 || !strings.Contains(p.Skipped[0].Reason, "did not create it") {
		t.Fatalf("plan with a foreign target: %+v, %v", p, err)
	}
	// The same target, created by cgwarden: reused, no mkdir, no controller
	// change.
	p, _, err = Adopt(Input{Node: n, Places: sc.Places, FS: exists, Owned: func(h string) bool { return h == target }})
	if err != nil || len(p.Ops) == 0 || slices.ContainsFunc(p.Ops, func(o Op) bool { return o.Kind == Mkdir }) {
		t.Fatalf("plan with an owned target: %+v, %v", p, err)
	}
	// An empty source: nothing to move.
	src := "/sys/fs/cgroup/kubepods-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice:cri-containerd:c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00/cgroup.procs"
	empty := fsOver{Scanner: *sc, procs: map[string]string{src: ""}}
	p, _, err = Adopt(Input{Node: n, Places: sc.Places, FS: empty})
	if err != nil || len(p.Ops) != 0 || len(p.Skipped) != 1 || !strings.Contains(p.Skipped[0].Reason, "holds no processes") {
		t.Fatalf("plan with an empty source: %+v, %v", p, err)
	}
	// Narrowing.
	if _, _, err := Adopt(Input{Node: n, Places: sc.Places, FS: sc.FS, Pod: "no-such-pod"}); err == nil {
		t.Error("--pod with an unknown pod was accepted")
	}
	if _, _, err := Adopt(Input{Node: n, Places: sc.Places, FS: sc.FS, Only: []string{"cpu-weights"}}); err == nil {
		t.Error("--only with a rule fix cannot repair was accepted")
	}
	if p, _, err := Adopt(Input{Node: n, Places: sc.Places, FS: sc.FS, Pod: "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c", Only: []string{rules.MisplacedContainer}}); err != nil || len(p.Ops) == 0 {
		t.Errorf("--pod <uid> --only %s: %v, %v", rules.MisplacedContainer, p, err)
	}
}

func FuzzParseControlChange(f *testing.F) {
	for _, s := range []string{"+cpu", "+cpu -memory", "", "cpu", "+", "+cpu\n-io"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseControlChange(s)
		if err != nil {
			return
		}
		for c := range m {
			if !knownControllers[c] {
				t.Fatalf("accepted unknown controller %q", c)
			}
		}
	})
}

// TestIdleAgreesWithAdopt: Idle, which the agent's adopter asks before it
// locks the journal, says a scan is idle exactly when Adopt would plan
// nothing and skip nothing in it: for every embedded snapshot, with its
// pods file and without metadata.
func TestIdleAgreesWithAdopt(t *testing.T) {
	var busy int
	for _, name := range examples.Names() {
		metas := map[string]*metadata.Set{"no metadata": nil}
		if pods, err := metadata.ReadPodsFile("../examples/snapshots/" + name + ".pods.json"); err == nil {
			metas["pods file"] = metadata.NewSet(pods)
		}
		for what, meta := range metas {
			n, sc := scanExample(t, name, meta)
			p, _, err := Adopt(Input{Node: n, Places: sc.Places, FS: sc.FS})
			if err != nil {
				t.Fatal(err)
			}
			nothing := len(p.Ops) == 0 && len(p.Skipped) == 0
			if got := Idle(n); got != nothing {
				t.Errorf("%s (%s): Idle = %v, but Adopt plans %d operations and skips %d", name, what, got, len(p.Ops), len(p.Skipped))
			}
			if !nothing {
				busy++
			}
		}
	}
	if busy == 0 {
		t.Fatal("no snapshot has a misplaced container: the test shows nothing")
	}
}
