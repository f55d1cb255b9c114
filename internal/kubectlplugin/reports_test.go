package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inspect"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/serve"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// agentBody is what an agent serving an embedded snapshot (named by its
// pods file, as `serve --snapshot X --pods X.pods.json` does) answers on
// path; for seed 003 as an agent that reads its Node too (the runtime
// the Node reports), for the other as one that does not.
func agentBody(t *testing.T, name, path string) []byte {
	t.Helper()
	b, ok := examples.Open(name)
	if !ok {
		t.Fatalf("no example %s", name)
	}
	snap, err := snapshot.Load(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	pods, err := metadata.ReadPodsFile(filepath.Join("..", "examples", "snapshots", name+".pods.json"))
	if err != nil {
		t.Fatal(err)
	}
	meta := metadata.NewSet(pods)
	meta.SetNodeInfo(metadata.NodeInfo{ContainerRuntimeVersion: nodeRuntime(name)})
	s := serve.New(serve.Config{NodeName: name})
	if err := s.FeedSamples(snap.Samples, meta); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	s.LocalHandler().ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	if w.Code != 200 {
		t.Fatalf("%s %s: %d %s", name, path, w.Code, w.Body.String())
	}
	return w.Body.Bytes()
}

// nodeRuntime is the containerRuntimeVersion the Node of an example
// reports, "" when its agent does not know: seed 003's k3s node ran
// containerd 1.6.28 (the snapshot's origin line).
func nodeRuntime(example string) string {
	if example == "seed-003-k3s-spin" {
		return "containerd://1.6.28"
	}
	return ""
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update, then review the diff):\n%s", p, got)
	}
}

// Two nodes (two embedded snapshots served as their agents would serve
// them) and one that could not be read, as one table and one document.
func TestClusterTables(t *testing.T) {
	nodes := []string{"cgroupfs-v1-containerd", "seed-003-k3s-spin"}
	for _, k := range []kind{auditKind, inspectKind} {
		for _, c := range []struct {
			name string
			sel  selection
		}{{"all", selection{all: true}}, {"default", selection{namespace: "default"}}} {
			var results []Result
			for _, n := range nodes {
				results = append(results, Result{Agent: Agent{Node: n, Namespace: "cgwarden-system", Pod: "cgwarden-" + n[:4]}, Body: agentBody(t, n, k.path)})
			}
			results = append(results, Result{Agent: Agent{Node: "down", Namespace: "cgwarden-system", Pod: "cgwarden-down"}, Err: errString("GET /audit: connection refused")})
			for _, out := range []string{"table", "json"} {
				o := &Options{Output: out}
				doc, failed := o.render(results, c.sel, k)
				if failed != 1 {
					t.Errorf("%d failed nodes, want 1", failed)
				}
				var b bytes.Buffer
				if err := o.write(&b, doc, k); err != nil {
					t.Fatal(err)
				}
				golden(t, k.name+"-"+c.name+"."+out, b.Bytes())
			}
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// With a namespace selected, only that namespace's findings are kept,
// the counts follow, and what is kept is the agent's JSON as sent: over
// the namespaces of the example's pods, every finding about a pod is kept
// once.
func TestSelectionKeepsTheAgentsJSON(t *testing.T) {
	body := agentBody(t, "cgroupfs-v1-containerd", "/audit")
	var all struct {
		Findings []finding `json:"findings"`
	}
	if err := json.Unmarshal(body, &all); err != nil {
		t.Fatal(err)
	}
	sent := map[string]bool{}
	var raw struct {
		Findings []json.RawMessage `json:"findings"`
	}
	_ = json.Unmarshal(body, &raw)
	for _, f := range raw.Findings {
		sent[string(f)] = true
	}
	kept := 0
	for _, ns := range []string{"default", "kube-system", "db"} {
		sel, rows, _, err := selectAudit(body, selection{namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Counts   map[string]int    `json:"counts"`
			Findings []json.RawMessage `json:"findings"`
		}
		if err := json.Unmarshal(sel, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Findings) != len(rows) || got.Counts["error"]+got.Counts["warning"]+got.Counts["info"] != len(rows) {
			t.Errorf("-n %s: %d findings, %d rows, counts %v", ns, len(got.Findings), len(rows), got.Counts)
		}
		for i, f := range got.Findings {
			if !sent[string(f)] {
				t.Errorf("-n %s: finding %d is not one the agent sent: %s", ns, i, f)
			}
			if rows[i].Subject.Namespace != ns {
				t.Errorf("-n %s: finding %d is about %s", ns, i, rows[i].Subject)
			}
		}
		kept += len(rows)
	}
	onPods := 0
	for _, f := range all.Findings {
		if f.Subject.PodUID != "" || f.Subject.PodName != "" {
			onPods++
		}
	}
	if kept != onPods || onPods == 0 {
		t.Errorf("kept %d findings over the namespaces, want the %d about pods", kept, onPods)
	}
}

// The audit table ends with a line per node that answered, saying what
// its agent's node header says (cgroup version, the kubelet's driver, the
// container runtime); an agent that does not say (an older one, one that
// cannot read its Node, one older still without a header) is shown as
// unknown, not failed, and its report passes to -o json as sent.
func TestAuditNodeLines(t *testing.T) {
	body := func(node string) []byte {
		b := `{"counts":{"error":0,"warning":0,"info":0},"findings":[]`
		if node != "" {
			b += `,"node":` + node
		}
		return []byte(b + "}")
	}
	agents := []struct {
		name, node, line string
	}{
		{"v1-node", `{"cpus":4,"cgroupVersion":"v1","driver":"cgroupfs","kubeRoot":"/kubepods","containerRuntimeVersion":"containerd://1.7.27","cgroups":21,"pods":4}`,
			"node v1-node: cgroup v1, cgroupfs driver, containerd://1.7.27"},
		{"127.0.0.2", `{"cpus":2,"cgroupVersion":"v2","driver":"systemd","kubeRoot":"/kubepods.slice","containerRuntimeVersion":"containerd://2.4.2","cgroups":40,"pods":9}`,
			"node 127.0.0.2: cgroup v2, systemd driver, containerd://2.4.2"},
		{"hybrid", `{"cpus":4,"cgroupVersion":"v1","hybrid":true,"driver":"systemd","kubeRoot":"/kubepods.slice","containerRuntimeVersion":"cri-o://1.33.1","cgroups":21,"pods":4}`,
			"node hybrid: cgroup v1 (hybrid), systemd driver, cri-o://1.33.1"},
		{"no-kubepods", `{"cpus":2,"cgroupVersion":"v2","driver":null,"kubeRoot":null,"cgroups":3,"pods":0}`,
			"node no-kubepods: cgroup v2, no kubepods hierarchy, runtime unknown"},
		{"old-agent", `{"cpus":2,"cgroupVersion":"v2","driver":"systemd","kubeRoot":"/kubepods.slice","cgroups":40,"pods":9}`,
			"node old-agent: cgroup v2, systemd driver, runtime unknown"},
		{"no-header", "", "node no-header: cgroup version unknown (agent too old)"},
		{"odd-header", `"v2"`, "node odd-header: cgroup version unknown (agent too old)"},
	}
	var results []Result
	want := "NODE  SEVERITY  RULE  SUBJECT  EVIDENCE\n\n"
	for _, a := range agents {
		results = append(results, Result{Agent: Agent{Node: a.name, Namespace: "cgwarden-system", Pod: "cgwarden-" + a.name}, Body: body(a.node)})
		want += a.line + "\n"
	}
	results = append(results, Result{Agent: Agent{Node: "down", Namespace: "cgwarden-system", Pod: "cgwarden-down"}, Err: errString("connection refused")})
	o := &Options{Output: "table"}
	doc, failed := o.render(results, selection{all: true}, auditKind)
	if failed != 1 {
		t.Errorf("%d failed nodes, want only the one that did not answer", failed)
	}
	var b bytes.Buffer
	if err := o.write(&b, doc, auditKind); err != nil {
		t.Fatal(err)
	}
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	for i, n := range doc.Nodes[:len(agents)] {
		var got struct {
			Node json.RawMessage `json:"node"`
		}
		if err := json.Unmarshal(n.Report, &got); err != nil {
			t.Fatal(err)
		}
		sent := agents[i].node
		if sent == "" {
			sent = "null" // no header sent: none written
		}
		if string(got.Node) != sent {
			t.Errorf("%s: -o json's node %s, want it as the agent sent it: %s", n.Name, got.Node, sent)
		}
	}
}

// TestFillRuntimes: a node line whose agent did not name the runtime
// gets it from the Node (one GET for one node, a LIST for more); one the
// agent named keeps the agent's; a user who may not read Nodes keeps
// "runtime unknown" and is told.
func TestFillRuntimes(t *testing.T) {
	node := func(name, runtime string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{ContainerRuntimeVersion: runtime}}}
	}
	header := func(runtime string) *inspect.NodeJSON {
		return &inspect.NodeJSON{CgroupVersion: "v2", ContainerRuntimeVersion: runtime}
	}
	for _, c := range []struct {
		name      string
		audits    []nodeAudit
		forbid    bool
		want      []string
		verbs     []string
		wantError bool
	}{
		{name: "one node", audits: []nodeAudit{{name: "a", node: header("")}, {name: "b", node: header("cri-o://1.33.1")}},
			want: []string{"containerd://2.4.2", "cri-o://1.33.1"}, verbs: []string{"get"}},
		{name: "two nodes", audits: []nodeAudit{{name: "a", node: header("")}, {name: "c", node: header("")}, {name: "old", node: nil}},
			want: []string{"containerd://2.4.2", "containerd://1.7.27", ""}, verbs: []string{"list"}},
		{name: "nothing to fill", audits: []nodeAudit{{name: "b", node: header("cri-o://1.33.1")}},
			want: []string{"cri-o://1.33.1"}},
		{name: "forbidden", audits: []nodeAudit{{name: "a", node: header("")}, {name: "c", node: header("")}}, forbid: true,
			want: []string{"", ""}, verbs: []string{"list"}, wantError: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs := fake.NewClientset(node("a", "containerd://2.4.2"), node("b", "docker://28"), node("c", "containerd://1.7.27"))
			if c.forbid {
				cs.PrependReactor("*", "nodes", func(k8stesting.Action) (bool, kruntime.Object, error) {
					return true, nil, apierrors.NewForbidden(corev1.Resource("nodes"), "", errors.New("no"))
				})
			}
			var errOut bytes.Buffer
			fillRuntimes(context.Background(), &errOut, cs.CoreV1(), c.audits)
			for i, a := range c.audits {
				got := ""
				if a.node != nil {
					got = a.node.ContainerRuntimeVersion
				}
				if got != c.want[i] {
					t.Errorf("node %s: runtime %q, want %q", a.name, got, c.want[i])
				}
			}
			var verbs []string
			for _, a := range cs.Actions() {
				verbs = append(verbs, a.GetVerb())
			}
			if !slices.Equal(verbs, c.verbs) {
				t.Errorf("requests %v, want %v", verbs, c.verbs)
			}
			if told := strings.Contains(errOut.String(), "forbidden"); told != c.wantError {
				t.Errorf("stderr %q", errOut.String())
			}
		})
	}
}

// TestAuditKeepsSizes: -o json passes the audit's sizes on (they were
// dropped), its pods selected by namespace as the findings are, every
// other field of it as sent.
func TestAuditKeepsSizes(t *testing.T) {
	body := []byte(`{"counts":{"error":0,"warning":0,"info":0},"findings":[],
		"sizes":{"allocatableMilliCPU":2000,"maxSizes":"a=500m","pods":[
			{"subject":{"kind":"pod","podName":"vm","namespace":"a"},"from":"annotation","status":"capped","milliCPU":500},
			{"subject":{"kind":"pod","podName":"vm","namespace":"b"},"from":"vm-object","status":"taken","milliCPU":1000}]}}`)
	for _, c := range []struct {
		sel  selection
		want []string
	}{
		{selection{all: true}, []string{"a", "b"}},
		{selection{namespace: "a"}, []string{"a"}},
		{selection{namespace: "c"}, []string{}},
	} {
		out, _, _, err := selectAudit(body, c.sel)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Sizes struct {
				Allocatable int64  `json:"allocatableMilliCPU"`
				MaxSizes    string `json:"maxSizes"`
				Pods        []struct {
					Subject struct {
						Namespace string `json:"namespace"`
					} `json:"subject"`
					MilliCPU int64 `json:"milliCPU"`
				} `json:"pods"`
			} `json:"sizes"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		ns := []string{}
		for _, p := range got.Sizes.Pods {
			ns = append(ns, p.Subject.Namespace)
		}
		if !slices.Equal(ns, c.want) || got.Sizes.Allocatable != 2000 || got.Sizes.MaxSizes != "a=500m" {
			t.Errorf("%+v: sizes %s, want the pods of %v and the rest as sent", c.sel, out, c.want)
		}
	}
}
