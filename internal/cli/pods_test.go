package cli

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

const seed003Pods = "../examples/snapshots/seed-003-k3s-spin.pods.json"

// podsFileWith writes the seed-003 pods file with only the pods whose UID
// starts with one of keep.
func podsFileWith(t *testing.T, keep ...string) string {
	t.Helper()
	raw, err := os.ReadFile(seed003Pods)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var items []any
	for _, it := range doc["items"].([]any) {
		uid := it.(map[string]any)["metadata"].(map[string]any)["uid"].(string)
		for _, k := range keep {
			if strings.HasPrefix(uid, k) {
				items = append(items, it)
			}
		}
	}
	doc["items"] = items
	b, _ := json.Marshal(doc)
	return writeTemp(t, "pods.json", string(b))
}

type auditDoc struct {
	Findings []struct {
		Rule, Severity, Remedy string
		Subject                struct{ PodUID string }
		Evidence               map[string]any
	}
	Notes []string
}

func auditJSON(t *testing.T, args ...string) (auditDoc, string, int) {
	t.Helper()
	out, errs, code := run(append([]string{"audit", "-o", "json"}, args...)...)
	var doc auditDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON (exit %d, stderr %q): %v", code, errs, err)
	}
	return doc, errs, code
}

// audit says on stderr how much of the pods file is on the node.
func TestPodsFileMatchCount(t *testing.T) {
	_, errs, _ := auditJSON(t, "--snapshot", "example:seed-003-k3s-spin", "--pods", seed003Pods)
	if !strings.Contains(errs, "2 of its 2 pods are on this node; 0 of the node's 2 pods are not in it") {
		t.Errorf("stderr %q", errs)
	}
	_, errs, _ = run("inspect", "--snapshot", "example:seed-003-k3s-spin", "--pods", podsFileWith(t, "79c5"))
	if !strings.Contains(errs, "1 of its 1 pods are on this node; 1 of the node's 2 pods are not in it") {
		t.Errorf("inspect stderr %q", errs)
	}
	_, errs, _ = run("inspect", "--snapshot", "example:seed-003-k3s-spin", "--pods", podsFileWith(t))
	if !strings.Contains(errs, "lists no pod") {
		t.Errorf("inspect with an empty pods file: stderr %q", errs)
	}
}

// A pods file from another node (seed 000's, 57 pods) names none of seed
// 003's pods: a loud warning, and no orphan-cgroup finding (every pod
// would look orphaned, the busy one called a leftover).
func TestPodsFileFromAnotherNode(t *testing.T) {
	doc, errs, code := auditJSON(t, "--snapshot", "example:seed-003-k3s-spin", "--pods", seed000+".pods.json")
	if !strings.Contains(errs, "warning: NONE of the 57 pods in --pods") {
		t.Errorf("no loud warning: %q", errs)
	}
	for _, f := range doc.Findings {
		if f.Rule == "orphan-cgroup" {
			t.Errorf("orphan-cgroup finding from another node's pods file: %+v", f)
		}
	}
	if !strings.Contains(strings.Join(doc.Notes, "\n"), "orphan-cgroup not checked: the pod metadata names none of the node's 2 pods") {
		t.Errorf("notes %q", doc.Notes)
	}
	if code != 1 {
		t.Errorf("exit %d, want 1 (the misplaced container is still found)", code)
	}
}

// A pods file that lacks the busy seed-003 pod: its pod cgroup is empty,
// but its misplaced container runs at 0.95 cores. It used to be called an
// empty leftover with "rmdir" advised; no finding may advise removing a
// cgroup of a pod that runs anywhere.
func TestNoRmdirForAPodThatRuns(t *testing.T) {
	doc, _, _ := auditJSON(t, "--snapshot", "example:seed-003-k3s-spin", "--pods", podsFileWith(t, "79c5"))
	found := false
	for _, f := range doc.Findings {
		if strings.Contains(strings.ToLower(f.Remedy), "rmdir") || strings.Contains(f.Remedy, "Remove it") {
			t.Errorf("%s finding for %s advises removing a cgroup: %q", f.Rule, f.Subject.PodUID, f.Remedy)
		}
		if f.Rule == "orphan-cgroup" && f.Subject.PodUID == "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c" {
			found = true
			if f.Severity != "warning" || f.Evidence["processes"] == float64(0) || f.Evidence["containersOutside"] != float64(1) {
				t.Errorf("the busy pod's finding: %+v", f)
			}
		}
	}
	if !found {
		t.Error("no orphan-cgroup finding for the pod the file lacks")
	}
	if !strings.Contains(strings.Join(doc.Notes, "\n"), "names only 1 of the node's 2 pods") {
		t.Errorf("no note that the metadata names few of the node's pods: %q", doc.Notes)
	}
}
