package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

// schemaDir holds the JSON Schemas of inspect, audit and fix output.
const schemaDir = "../../docs/schemas"

// schemas compiles docs/schemas/*.schema.json (audit's refers to
// inspect's node header by its $id).
func schemas(t *testing.T) map[string]*jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	ids := map[string]string{}
	for _, name := range []string{"inspect", "audit", "fix"} {
		b, err := os.ReadFile(filepath.Join(schemaDir, name+".schema.json"))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		id := doc.(map[string]any)["$id"].(string)
		if err := c.AddResource(id, doc); err != nil {
			t.Fatal(err)
		}
		ids[name] = id
	}
	out := map[string]*jsonschema.Schema{}
	for name, id := range ids {
		s, err := c.Compile(id)
		if err != nil {
			t.Fatalf("%s schema: %v", name, err)
		}
		out[name] = s
	}
	return out
}

func validate(t *testing.T, s *jsonschema.Schema, what string, b []byte) error {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: not JSON: %v", what, err)
	}
	return s.Validate(inst)
}

// Issue 16 item 12: every JSON (and YAML) golden of inspect and audit, and
// fix's plans and results, validate against docs/schemas.
func TestSchemasValidateGoldens(t *testing.T) {
	s := schemas(t)
	files, _ := filepath.Glob("testdata/golden/*")
	n := 0
	for _, f := range files {
		base := filepath.Base(f)
		kind, _, _ := strings.Cut(base, "-")
		if s[kind] == nil || (!strings.HasSuffix(f, ".json") && !strings.HasSuffix(f, ".yaml")) {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".yaml") {
			if b, err = yaml.YAMLToJSON(b); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
		if err := validate(t, s[kind], f, b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		n++
	}
	if n < 12 {
		t.Errorf("validated %d goldens, want 12: inspect's 8 JSON and 1 YAML, audit's 2 JSON and 1 YAML", n)
	}
	// fix: the plan golden of internal/plan, and the CLI's dry runs (the
	// adopt plan of seed 003, the weight plan of seed 000).
	plans := map[string][]string{
		"seed-003": {"fix", "--snapshot", "example:seed-003-k3s-spin", "-o", "json"},
		"seed-000": {"fix", "--snapshot", "example:seed-000-eks-neonvm", "--pods", seed000 + ".pods.json", "--vms", seed000 + ".vms.json", "-o", "json"},
	}
	for name, args := range plans {
		out, errs, code := run(append(args, "--journal-dir", t.TempDir())...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		if err := validate(t, s["fix"], name, []byte(out)); err != nil {
			t.Errorf("fix %s: %v", name, err)
		}
	}
	b, err := os.ReadFile("../plan/testdata/adopt-seed-003.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(t, s["fix"], "adopt-seed-003.json", b); err != nil {
		t.Errorf("plan golden: %v", err)
	}
	res := `{"plan": ` + string(b) + `, "run": "r1", "steps": [{"op": {"kind": "rmdir", "rule": "orphan-cgroup", "description": "x"}, "moved": [1]}]}`
	if err := validate(t, s["fix"], "result", []byte(res)); err != nil {
		t.Errorf("an apply result: %v", err)
	}
}

// The schemas are not vacuous: the conventions they state reject output
// that breaks them.
func TestSchemasRejectBrokenConventions(t *testing.T) {
	s := schemas(t)
	b, err := os.ReadFile("testdata/golden/inspect-seed-003-k3s-spin.json")
	if err != nil {
		t.Fatal(err)
	}
	for what, edit := range map[string][2]string{
		"an empty string for an unknown name": {`"name": null`, `"name": ""`},
		"a pod's uid renamed":                 {`"uid":`, `"podUID":`},
		"an unknown cgroup version":           {`"cgroupVersion": "v2"`, `"cgroupVersion": "2"`},
		"a quota below the -1 sentinel":       {`"quotaCores": 0.5`, `"quotaCores": -2`},
	} {
		bad := strings.Replace(string(b), edit[0], edit[1], 1)
		if bad == string(b) {
			t.Fatalf("%s: %q not in the golden", what, edit[0])
		}
		if validate(t, s["inspect"], what, []byte(bad)) == nil {
			t.Errorf("inspect schema accepts %s", what)
		}
	}
	a, err := os.ReadFile("testdata/golden/audit-seed-003.json")
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(a), `"counts": {`, `"total": {`, 1)
	if validate(t, s["audit"], "audit without counts", []byte(bad)) == nil {
		t.Errorf("audit schema accepts a report without counts")
	}
}

// The audit's node header may say the container runtime (the Node's
// status.nodeInfo.containerRuntimeVersion); leaving it out (unknown, an
// older agent) still validates, and an empty string for unknown does not.
func TestSchemaAuditNodeRuntime(t *testing.T) {
	s := schemas(t)["audit"]
	b, err := os.ReadFile("testdata/golden/audit-seed-003.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(t, s, "without the runtime", b); err != nil {
		t.Errorf("an audit without the runtime: %v", err)
	}
	for value, ok := range map[string]bool{`"containerd://2.4.2"`: true, `""`: false, `null`: false} {
		edited := strings.Replace(string(b), `"kubeRoot": "/kubepods.slice",`, `"kubeRoot": "/kubepods.slice", "containerRuntimeVersion": `+value+`,`, 1)
		if edited == string(b) {
			t.Fatal("no kubeRoot in the golden")
		}
		if err := validate(t, s, value, []byte(edited)); (err == nil) != ok {
			t.Errorf("containerRuntimeVersion %s: valid %v, want %v (%v)", value, err == nil, ok, err)
		}
	}
}
