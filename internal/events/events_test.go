package events

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/client-go/tools/record"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/rules"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// scan is a node of n misplaced pods and their findings.
func scan(n int) (*inventory.Node, *audit.Report) {
	node := &inventory.Node{}
	r := &audit.Report{}
	for i := 0; i < n; i++ {
		uid := fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
		node.Pods = append(node.Pods, &inventory.Pod{UID: uid, Name: fmt.Sprintf("app-%d", i), Namespace: "default"})
		r.Findings = append(r.Findings, audit.Finding{Rule: rules.MisplacedContainer, Severity: audit.Error,
			Subject: audit.Subject{Kind: "pod", PodUID: uid, PodName: fmt.Sprintf("app-%d", i), Namespace: "default"},
			Message: "Container outside its pod."})
	}
	return node, r
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// One Event per new finding, none repeated at the next scan; 100 pods
// misplaced at once give at most MaxPerScan pod Events per scan plus one
// on the node, until each finding has had its Event once.
func TestNoStormAndNoRepeats(t *testing.T) {
	rec := record.NewFakeRecorder(1000)
	n := NewWithRecorder(rec, "node-1", nil)
	node, r := scan(3)
	n.Findings(node, r)
	if got := drain(rec); len(got) != 3 || !strings.HasPrefix(got[0], "Warning MisplacedContainer Container outside its pod.") {
		t.Fatalf("first scan: %q", got)
	}
	n.Findings(node, r)
	if got := drain(rec); len(got) != 0 {
		t.Fatalf("the same findings again gave Events: %q", got)
	}
	// A finding missed by fewer than ForgetAfter scans in a row is the
	// same finding; one gone for ForgetAfter scans and back is new again.
	for i := 0; i < ForgetAfter-1; i++ {
		n.Findings(node, &audit.Report{Findings: r.Findings[:2]})
	}
	n.Findings(node, r)
	if got := drain(rec); len(got) != 0 {
		t.Fatalf("a finding missed by %d scans: %q, want no Event", ForgetAfter-1, got)
	}
	for i := 0; i < ForgetAfter; i++ {
		n.Findings(node, &audit.Report{Findings: r.Findings[:2]})
	}
	n.Findings(node, r)
	if got := drain(rec); len(got) != 1 {
		t.Fatalf("a finding back after %d scans: %q, want one Event", ForgetAfter, got)
	}

	rec = record.NewFakeRecorder(1000)
	n = NewWithRecorder(rec, "node-1", nil)
	node, r = scan(100)
	total, scans := 0, 0
	for ; scans < 10; scans++ {
		n.Findings(node, r)
		got := drain(rec)
		if len(got) > MaxPerScan+1 {
			t.Fatalf("scan %d: %d Events, want at most %d", scans, len(got), MaxPerScan+1)
		}
		for _, e := range got {
			if !strings.Contains(e, "ManyFindings") {
				total++
			}
		}
		if len(got) == 0 {
			break
		}
	}
	if total != 100 {
		t.Errorf("%d pod Events over %d scans, want each of the 100 findings once", total, scans)
	}
}

func TestReason(t *testing.T) {
	for in, want := range map[string]string{"misplaced-container": "MisplacedContainer", "besteffort-starvation": "BesteffortStarvation", "x": "X"} {
		if got := Reason(in); got != want {
			t.Errorf("Reason(%q) = %q, want %q", in, got, want)
		}
	}
}

// A fix applied before the first scan named its pod is reported on the
// pod at the next scan.
func TestFixBeforeFirstScan(t *testing.T) {
	rec := record.NewFakeRecorder(100)
	n := NewWithRecorder(rec, "node-1", nil)
	node, _ := scan(1)
	n.Applied([]Step{{Pod: node.Pods[0].UID, Rule: "size-blind-weights", Description: "set cpu.shares 2 → 4096"}})
	if got := drain(rec); len(got) != 0 {
		t.Fatalf("before any scan: %q", got)
	}
	n.Findings(node, &audit.Report{})
	got := drain(rec)
	if len(got) != 1 || !strings.HasPrefix(got[0], "Normal CgwardenSizeBlindWeightsFixed set cpu.shares 2 → 4096") {
		t.Fatalf("after the scan: %q", got)
	}
}

// A finding is the same from scan to scan by its pod's UID and its
// container's ID, whatever the scan knew of names and wherever the
// container's cgroup was: seen in the cluster lane, where a scan in the
// middle of adopting 100 containers named some of them differently, and
// 11 pods got their MisplacedContainer Event twice.
func TestSameFindingByIdentity(t *testing.T) {
	rec := record.NewFakeRecorder(100)
	n := NewWithRecorder(rec, "node-1", nil)
	uid, id := "00000000-0000-0000-0000-000000000001", "c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00"
	node := &inventory.Node{Pods: []*inventory.Pod{{UID: uid, Name: "app", Namespace: "default"}}}
	finding := func(name, cgroup string) *audit.Report {
		return &audit.Report{Findings: []audit.Finding{{Rule: rules.MisplacedContainer, Severity: audit.Error,
			Subject: audit.Subject{Kind: "container", PodUID: uid, PodName: "app", Namespace: "default", Container: name, ContainerID: id, Cgroup: cgroup},
			Message: "Container outside its pod."}}}
	}
	n.Findings(node, finding("", "/kubepods-besteffort-pod00000000_0000_0000_0000_000000000001.slice:cri-containerd:"+id))
	n.Findings(node, finding("main", "/kubepods/besteffort/pod"+uid+"/"+id))
	if got := drain(rec); len(got) != 1 {
		t.Fatalf("one finding named two ways: %q, want one Event", got)
	}
	// Another container of the pod is another finding.
	other := finding("side", "/x")
	other.Findings[0].Subject.ContainerID = "d" + id[1:]
	n.Findings(node, &audit.Report{Findings: append(finding("main", "/y").Findings, other.Findings...)})
	if got := drain(rec); len(got) != 1 {
		t.Fatalf("a second container's finding: %q, want one Event", got)
	}
}

// refRecorder keeps the object each Event is about (FakeRecorder keeps
// only its kind).
type refRecorder struct {
	refs    []*corev1.ObjectReference
	reasons []string
}

func (r *refRecorder) Event(o runtime.Object, _, reason, _ string) {
	r.refs = append(r.refs, o.(*corev1.ObjectReference))
	r.reasons = append(r.reasons, reason)
}
func (r *refRecorder) Eventf(o runtime.Object, t, reason, f string, a ...any) {
	r.Event(o, t, reason, f)
}
func (r *refRecorder) AnnotatedEventf(o runtime.Object, _ map[string]string, t, reason, f string, a ...any) {
	r.Event(o, t, reason, f)
}

// Pod names a pod no scan has seen (the NRI plugin's case) at once, on the
// pod, not on the node and not later.
func TestPodBeforeAnyScan(t *testing.T) {
	rec := &refRecorder{}
	n := NewWithRecorder(rec, "node-1", nil)
	n.Pod("apps", "web", "u-1", "CgwardenContainerPlaced", "container app created in cgroup /x")
	if len(rec.refs) != 1 || rec.reasons[0] != "CgwardenContainerPlaced" {
		t.Fatalf("events %v %v, want one CgwardenContainerPlaced", rec.refs, rec.reasons)
	}
	if r := rec.refs[0]; r.Kind != "Pod" || r.Namespace != "apps" || r.Name != "web" || r.UID != "u-1" {
		t.Errorf("event on %+v, want pod apps/web (u-1)", r)
	}
}
