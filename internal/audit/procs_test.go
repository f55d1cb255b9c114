package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// TestProcsWhereUsedSameAudit: a scan that reads the process lists only
// where a count is used (inventory.Scanner.ProcsWhereUsed, as the agent
// scans) gives the same audit, text and JSON, and the same pods
// (misplaced containers, leftovers) as a scan that reads every list, on
// every embedded snapshot, without metadata, with its pods file, and with
// its pods file less every other pod (orphans, some with processes).
func TestProcsWhereUsedSameAudit(t *testing.T) {
	for _, name := range examples.Names() {
		raw, _ := examples.Open(name)
		s, err := snapshot.Load(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		metas := map[string]*metadata.Set{"none": nil}
		if f, err := os.Open(seedDir + name + ".pods.json"); err == nil {
			pods, err := metadata.ParsePods(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			metas["pods"] = metadata.NewSet(pods)
			var half []metadata.Pod
			for i, p := range pods {
				if i%2 == 0 {
					half = append(half, p)
				}
			}
			metas["half the pods"] = metadata.NewSet(half)
		}
		for what, meta := range metas {
			t.Run(name+"/"+what, func(t *testing.T) {
				all, allScans := procsScan(t, s, meta, false)
				used, usedScans := procsScan(t, s, meta, true)
				if a, u := auditText(t, all, meta), auditText(t, used, meta); a != u {
					t.Errorf("the audit differs\nevery list read:\n%s\nonly the lists used:\n%s", a, u)
				}
				if a, u := podFlags(all), podFlags(used); a != u {
					t.Errorf("the pods differ\nevery list read:\n%s\nonly the lists used:\n%s", a, u)
				}
				if allScans != usedScans {
					t.Errorf("read errors: %s with every list, %s with only the lists used", allScans, usedScans)
				}
			})
		}
	}
	// The v2 tree of TestTierAndOrphans (an orphan with processes, an
	// empty orphan), and the shapes whose process counts are used: an
	// empty literal-path twin of a placed container (a leftover), a busy
	// one of another, a Kata sandbox beside the pods, a NeonVM runner
	// outside kubepods.
	meta := metadata.NewSet([]metadata.Pod{{UID: uidA, Name: "web", Namespace: "ns", QoS: "burstable", RequestMilliCPU: ms(500)}})
	bu := "/kubepods.slice/kubepods-burstable.slice"
	var b strings.Builder
	b.WriteString("cgwarden snapshot v1\ntaken: 2026-01-01T00:00:00Z\n")
	b.WriteString("-- /proc/self/mountinfo --\n35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	b.WriteString("-- /sys/devices/system/cpu/online --\n0-1\n")
	for _, c := range []struct {
		path  string
		procs int
	}{
		{"/kubepods.slice", 0}, {bu, 0},
		{bu + "/kubepods-burstable-pod" + under(uidA) + ".slice", 0},
		{bu + "/kubepods-burstable-pod" + under(uidA) + ".slice/cri-containerd-" + strings.Repeat("a", 64) + ".scope", 1},
		{bu + "/kubepods-burstable-pod" + under(uidB) + ".slice", 0},
		{bu + "/kubepods-burstable-pod" + under(uidB) + ".slice/cri-containerd-" + strings.Repeat("c", 64) + ".scope", 2},
		{bu + "/kubepods-burstable-pod" + under(uidC) + ".slice", 0},
		{bu + "/kubepods-burstable-pod" + under(uidA) + ".slice/cri-containerd-" + strings.Repeat("b", 64) + ".scope", 1},
		{"/kubepods-burstable-pod" + under(uidA) + ".slice:cri-containerd:" + strings.Repeat("a", 64), 0},
		{"/kubepods-burstable-pod" + under(uidA) + ".slice:cri-containerd:" + strings.Repeat("b", 64), 3},
		{"/kubepods.slice/kata_" + strings.Repeat("d", 64), 4},
		{"/web-vm-runner", 5},
	} {
		d := "/sys/fs/cgroup" + c.path
		fmt.Fprintf(&b, "-- %s/cpu.weight --\n100\n-- %s/cpu.stat --\nusage_usec 10\n-- %s/cgroup.procs --\n", d, d, d)
		for i := range c.procs {
			fmt.Fprintf(&b, "%d\n", 100+i)
		}
	}
	s, err := snapshot.Load(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	all, _ := procsScan(t, s, meta, false)
	used, _ := procsScan(t, s, meta, true)
	a, u := auditText(t, all, meta), auditText(t, used, meta)
	if a != u {
		t.Errorf("the audit differs\nevery list read:\n%s\nonly the lists used:\n%s", a, u)
	}
	for _, want := range []string{`"processes":2`, `"processes":0`, `"processes":4`, `"processes":5`} {
		if !strings.Contains(u, want) {
			t.Errorf("no %s among the findings' process counts:\n%s", want, u)
		}
	}
	if f := podFlags(used); !strings.Contains(f, "leftover=true") {
		t.Errorf("no leftover among the pods:\n%s", f)
	}
	// The lists not used are not read: the known pod's container.
	ctr := used.Find(bu + "/kubepods-burstable-pod" + under(uidA) + ".slice/cri-containerd-" + strings.Repeat("a", 64) + ".scope")
	if ctr == nil || ctr.Stats.Procs != nil {
		t.Errorf("the known pod's container: %+v, want its process count unread", ctr)
	}
}

// procsScan scans the snapshot's samples as the CLI does, reading every
// process list or only those used; it returns the last node and its read
// error count.
func procsScan(t *testing.T, s *snapshot.Snapshot, meta *metadata.Set, onlyUsed bool) (*inventory.Node, string) {
	t.Helper()
	smp := &inventory.Sampling{Meta: meta}
	var n *inventory.Node
	for _, one := range s.Samples {
		sc, err := inventory.Open(one.FS)
		if err != nil {
			t.Fatal(err)
		}
		sc.ProcsWhereUsed = onlyUsed
		if n, err = smp.Take(sc, one.Time); err != nil {
			t.Fatal(err)
		}
	}
	return n, fmt.Sprint(len(n.Errors))
}

func auditText(t *testing.T, n *inventory.Node, meta *metadata.Set) string {
	t.Helper()
	r := Run(&Input{Node: n, Meta: meta})
	j, err := json.Marshal(JSON(n, r))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteText(&b, n, r); err != nil {
		t.Fatal(err)
	}
	return string(j) + "\n" + b.String()
}

// podFlags lists each pod's containers with what the scan made of them.
func podFlags(n *inventory.Node) string {
	var b strings.Builder
	for _, p := range n.Pods {
		for _, c := range p.Containers {
			fmt.Fprintf(&b, "%s %s %s misplaced=%v leftover=%v sandbox=%v %q\n", p.UID, c.ID, c.Cgroup.Path, c.Misplaced, c.Leftover, c.Sandbox, c.Unconfirmed)
		}
	}
	for _, c := range n.Unattached {
		fmt.Fprintf(&b, "unattached %s\n", c.Path)
	}
	for _, c := range n.Foreign {
		fmt.Fprintf(&b, "foreign %s\n", c.Path)
	}
	return b.String()
}
