package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	krand "k8s.io/apimachinery/pkg/util/rand"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// foreignFinding is one foreign-cgroup finding of the agent's /audit.
type foreignFinding struct {
	Rule    string `json:"rule"`
	Subject struct {
		PodUID      string `json:"podUID"`
		ContainerID string `json:"containerID"`
		Cgroup      string `json:"cgroup"`
	} `json:"subject"`
}

// TestAgentLeavesForeignCgroups: a delegated subtree outside the
// kubelet's tree (a scratch cgroup of the test's own, in the cpu
// hierarchy) holds two cgroups named like misplaced containers of real
// pods, each with a real process: one names pod A and an ID that is no
// container of any pod, the other names pod B and pod A's real container
// ID. The fix-mode agent adopting misplaced containers (testdata/agent-adopt)
// adopts A's and B's real misplaced containers (so it is adopting), and
// leaves both impostors where they are: its /audit reports each as
// foreign-cgroup, an Event ForeignCgroup is on each pod, its /metrics
// counts them, and after three more intervals each process is still in
// its own cgroup, in neither pod's.
func TestAgentLeavesForeignCgroups(t *testing.T) {
	e := cluster(t)
	importAgentImage(t)
	root, _ := cgroupRoot()
	ns := e.namespace(t)
	e.misplacedDeployment(t, ns, "real", 2, "exec sleep 3600")
	var a, b *corev1.Pod
	for _, p := range e.runningPods(t, ns, "real", 2, 120*time.Second) {
		if a == nil {
			a = p
		} else {
			b = p
		}
	}
	idA := containerID(a)

	// The delegated subtree and the two impostors, each with a process.
	deleg := filepath.Join(root, "cgwarden-delegated-"+krand.String(6))
	if err := os.Mkdir(deleg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(deleg) })
	impostors := []struct {
		pod *corev1.Pod
		id  string
		dir string
		cmd *exec.Cmd
	}{{pod: a, id: randomID(t)}, {pod: b, id: idA}}
	for i := range impostors {
		im := &impostors[i]
		im.dir = filepath.Join(deleg, literalName(string(im.pod.UID), im.id))
		if err := os.Mkdir(im.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(im.dir) })
		im.cmd = exec.Command("sleep", "600")
		if err := im.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Killed and reaped before the cgroups are removed (cleanups run
		// last-in first-out).
		t.Cleanup(func() { _ = im.cmd.Process.Kill(); _ = im.cmd.Wait() })
		if err := os.WriteFile(filepath.Join(im.dir, "cgroup.procs"), []byte(strconv.Itoa(im.cmd.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
		t.Logf("impostor of pod %s, container %.12s: pid %d in %s", im.pod.Name, im.id, im.cmd.Process.Pid, im.dir)
	}

	start := time.Now()
	e.installAgent(t, "testdata/agent-adopt-v1")
	for _, p := range []*corev1.Pod{a, b} {
		waitAdopted(t, root, p, containerID(p), 60*time.Second)
	}
	get := e.agentReader(t, ns)
	var found []foreignFinding
	poll.Until(t, 60*time.Second, "both impostors reported foreign in the agent's /audit", func() (bool, string, error) {
		code, body := get("/audit")
		if code != 200 {
			return false, fmt.Sprintf("%d %.200s", code, body), nil
		}
		var r struct{ Findings []foreignFinding }
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			return false, err.Error(), nil
		}
		found = nil
		for _, f := range r.Findings {
			for _, im := range impostors {
				if f.Rule == "foreign-cgroup" && strings.HasSuffix(im.dir, f.Subject.Cgroup) &&
					f.Subject.PodUID == string(im.pod.UID) && f.Subject.ContainerID == im.id {
					found = append(found, f)
				}
			}
		}
		return len(found) == 2, fmt.Sprintf("%d of 2: %+v", len(found), found), nil
	})
	t.Logf("both impostors reported foreign %v after the agent was installed", time.Since(start).Round(time.Second))
	for _, p := range []*corev1.Pod{a, b} {
		e.waitCgwardenEvent(t, p, "ForeignCgroup", corev1.EventTypeWarning)
	}
	code, body := get("/metrics")
	m := regexp.MustCompile(`(?m)^cgwarden_audit_findings\{rule="foreign-cgroup",severity="warning"\} (\d+)$`).FindStringSubmatch(body)
	if code != 200 || m == nil || atoi(m[1]) < 2 {
		t.Errorf("the agent's /metrics (%d) counts %v foreign-cgroup findings, want at least 2", code, m)
	}

	// Three more intervals: nothing moved.
	time.Sleep(3 * agentInterval)
	for _, im := range impostors {
		pid := strconv.Itoa(im.cmd.Process.Pid)
		if ps := procs(im.dir); !slices.Contains(ps, pid) {
			t.Errorf("impostor of pod %s: process %s no longer in %s (now in %s)", im.pod.Name, pid, im.dir, cpuCgroupOf(pid))
		}
		if cg := cpuCgroupOf(pid); strings.HasPrefix(cg, "/kubepods") {
			t.Errorf("impostor of pod %s: process %s moved into the kubelet's tree, %s", im.pod.Name, pid, cg)
		}
		if _, err := os.Stat(filepath.Join(root, "kubepods", "besteffort", "pod"+string(im.pod.UID), im.id)); err == nil {
			t.Errorf("impostor of pod %s: the agent made a cgroup for container %.12s in the pod", im.pod.Name, im.id)
		}
	}
}

// randomID is a container ID no runtime gave: 64 random hex digits.
func randomID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
