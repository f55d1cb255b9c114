package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// burner burns a little CPU in bursts (about a tenth of a core here).
const burner = `while true; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 0.5; done`

// TestAgentAdoptsMisplacedContainers: a Deployment of two busy pods under
// the misplace runtime (the runwasi shim's literal cgroup at the root).
// Without the agent their processes are outside their pod cgroups and the
// kubelet's own /stats/summary gives the pods (next to) no CPU while it
// gives their containers some. With the agent in fix mode
// (misplaced-container) each container is adopted — its processes in its
// pod's cgroup — within one interval: the existing ones, the one of a pod
// the Deployment makes after a delete, and the one the kubelet restarts
// after a kill; the kubelet's pod CPU becomes non-zero. Uninstalling the
// agent leaves the adopted processes where they are and the runtime's
// emptied literal cgroups in place (docs/fix.md); nothing else at the
// hierarchies' roots changes, and the runtime removes its literal cgroups
// when the pods go.
func TestAgentAdoptsMisplacedContainers(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	importAgentImage(t)
	root, _ := cgroupRoot()
	kubelet := e.kubeletClient(t)
	ns := e.namespace(t)
	hostBefore := rootEntries(t)
	e.misplacedDeployment(t, ns, "busy", 2, burner)
	pods := e.runningPods(t, ns, "busy", 2, 120*time.Second)

	// Misplaced: the processes are in the literal cgroup at the root, not
	// under the pod.
	for _, p := range pods {
		id := containerID(p)
		lit := filepath.Join(root, literalName(string(p.UID), id))
		ps := procs(lit)
		if len(ps) == 0 {
			t.Fatalf("pod %s: no process in %s: the misplace runtime did not place container %.12s there", p.Name, lit, id)
		}
		for _, pid := range ps {
			if cg := cpuCgroupOf(pid); cg == "/kubepods" || strings.HasPrefix(cg, "/kubepods/") {
				t.Errorf("pod %s: process %s is in %s, inside the kubelet's tree", p.Name, pid, cg)
			}
		}
		if ok, state := adopted(root, p, id); ok {
			t.Fatalf("adopted before any agent runs: %s", state)
		}
	}
	// The kubelet reads the pod's own cgroup (only the idle sandbox is
	// there) and its containers from the runtime.
	var before map[string]podCPU
	poll.Until(t, 120*time.Second, "the kubelet's CPU of the busy containers", func() (bool, string, error) {
		before = summaryCPU(t, kubelet, ns)
		ok := len(before) == 2
		for _, v := range before {
			ok = ok && v.containers > 0
		}
		return ok, fmt.Sprint(before), nil
	})
	for name, v := range before {
		t.Logf("without the agent, kubelet /stats/summary %s: pod %.0f nanocores, its container %.0f", name, v.pod, v.containers)
		if v.pod > v.containers/20 {
			t.Errorf("pod %s: the kubelet reads %.0f nanocores for the pod and %.0f for its container: the container looks placed", name, v.pod, v.containers)
		}
	}

	// The agent in fix mode: the existing containers within one interval
	// of its start.
	_, ready, uninstall := e.installAgent(t, "testdata/agent-adopt-v1")
	for _, p := range pods {
		at := waitAdopted(t, root, p, containerID(p), 60*time.Second)
		t.Logf("pod %s: container adopted %v after the agent was Ready", p.Name, at.Sub(ready).Round(100*time.Millisecond))
		if d := at.Sub(ready); d > agentInterval+adoptionSlack {
			t.Errorf("pod %s: adopted %v after the agent was Ready, want within one interval (%v + %v)", p.Name, d, agentInterval, adoptionSlack)
		}
	}
	poll.Until(t, 120*time.Second, "the kubelet's own pod CPU above 0", func() (bool, string, error) {
		now := summaryCPU(t, kubelet, ns)
		ok := len(now) == 2
		for _, v := range now {
			ok = ok && v.pod > 0
		}
		return ok, fmt.Sprint(now), nil
	})
	for name, v := range summaryCPU(t, kubelet, ns) {
		t.Logf("with the agent, kubelet /stats/summary %s: pod %.0f nanocores, its container %.0f", name, v.pod, v.containers)
	}

	// A pod deleted: the Deployment's new pod is adopted within one
	// interval of its container's start.
	var gone, kept *corev1.Pod
	for _, p := range pods {
		if gone == nil {
			gone = p
		} else {
			kept = p
		}
	}
	if err := e.cs.CoreV1().Pods(ns).Delete(ctx, gone.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var fresh *corev1.Pod
	poll.Until(t, 120*time.Second, "the Deployment's new pod running", func() (bool, string, error) {
		for name, p := range e.runningPods(t, ns, "busy", 2, 120*time.Second) {
			if name != gone.Name && name != kept.Name {
				fresh = p
				return true, "", nil
			}
		}
		return false, "no new pod yet", nil
	})
	checkAdoptedInTime(t, root, fresh, containerID(fresh), "a new pod")

	// A container killed: the kubelet restarts it (a new container, a new
	// literal cgroup), and that one is adopted too.
	oldID := containerID(kept)
	for _, pid := range procs(filepath.Join(root, "kubepods", "besteffort", "pod"+string(kept.UID), oldID)) {
		_ = syscall.Kill(atoi(pid), syscall.SIGKILL)
	}
	var restarted *corev1.Pod
	poll.Until(t, 120*time.Second, "the killed container restarted", func() (bool, string, error) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, kept.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		restarted = p
		id := containerID(p)
		return id != "" && id != oldID, describe(p), nil
	})
	checkAdoptedInTime(t, root, restarted, containerID(restarted), "a restarted container")

	// Each repair is an Event on its pod.
	for _, p := range []*corev1.Pod{fresh, restarted} {
		e.waitCgwardenEvent(t, p, "CgwardenMisplacedContainerFixed", "")
	}

	// Uninstall: the adopted processes stay under their pods, the
	// runtime's emptied literal cgroups stay (the runtime owns them), and
	// nothing else at the hierarchies' roots changed.
	uninstall()
	for _, p := range []*corev1.Pod{fresh, restarted} {
		id := containerID(p)
		if ok, state := adopted(root, p, id); !ok {
			t.Errorf("after uninstall: %s", state)
		}
		if _, err := os.Stat(filepath.Join(root, literalName(string(p.UID), id))); err != nil {
			t.Errorf("after uninstall, the runtime's emptied cgroup of %s: %v (the agent must leave it)", p.Name, err)
		}
	}
	if after := rootEntries(t); !slices.Equal(after, hostBefore) {
		t.Errorf("the hierarchies' roots changed:\nbefore %v\nafter  %v", hostBefore, after)
	}
	// The runtime removes its literal cgroups when the pods go.
	uids := map[string]bool{string(gone.UID): true, string(kept.UID): true, string(fresh.UID): true}
	if err := e.cs.AppsV1().Deployments(ns).Delete(ctx, "busy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 120*time.Second, "the literal cgroups of the test's pods gone", func() (bool, string, error) {
		left := literalsOf(t, uids)
		return len(left) == 0, strings.Join(left, " "), nil
	})
}

// checkAdoptedInTime waits for a new container's adoption and checks it
// came within one interval of the container's start.
func checkAdoptedInTime(t *testing.T, root string, p *corev1.Pod, id, what string) {
	t.Helper()
	at := waitAdopted(t, root, p, id, 60*time.Second)
	started := p.Status.ContainerStatuses[0].State.Running.StartedAt.Time
	d := at.Sub(started)
	t.Logf("%s (%s, container %.12s): adopted %v after the container started", what, p.Name, id, d.Round(100*time.Millisecond))
	if d > agentInterval+adoptionSlack {
		t.Errorf("%s: adopted %v after its container started, want within one interval (%v + %v)", what, d, agentInterval, adoptionSlack)
	}
}

// cpuCgroupOf is the cpu cgroup of a process: its v1 cpu line, else
// (v2) its unified one.
func cpuCgroupOf(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return ""
	}
	unified := ""
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 3)
		switch {
		case len(f) != 3:
		case slices.Contains(strings.Split(f[1], ","), "cpu"):
			return f[2]
		case f[0] == "0" && f[1] == "":
			unified = f[2]
		}
	}
	return unified
}

// waitCgwardenEvent waits (up to 30 s) for an Event from cgwarden with
// reason (and type, when not empty) on pod p.
func (e *env) waitCgwardenEvent(t *testing.T, p *corev1.Pod, reason, typ string) {
	t.Helper()
	poll.Until(t, 30*time.Second, "a "+reason+" Event on "+p.Name, func() (bool, string, error) {
		evs, err := e.cs.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
		if err != nil {
			return false, "", err
		}
		var seen []string
		for _, ev := range evs.Items {
			seen = append(seen, ev.Reason)
			if ev.Source.Component == "cgwarden" && ev.Reason == reason && (typ == "" || ev.Type == typ) {
				return true, "", nil
			}
		}
		return false, strings.Join(seen, ","), nil
	})
}
