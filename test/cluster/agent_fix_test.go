package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// TestAgentHoldsVMWeights: the agent in fix mode with two BestEffort pods
// that declare 1 and 4 CPUs (cgwarden.io/cpu). Their pod cgroups get the
// kubelet's weights for those sizes, the BestEffort tier 2 + their sum
// (capped at what the node's CPUs would request), and the tier stays
// there while the real kubelet resets it (its periodic QoS update, once a
// minute): cgwarden counts the reset it undid. The pods get Events for
// the fix and the node one for the size-blind weights it found.
func TestAgentHoldsVMWeights(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	importAgentImage(t)
	kubectl := func(args ...string) (string, error) {
		out, err := exec.Command(e.kubectl, append([]string{"--kubeconfig", e.kubeconfig}, args...)...).CombinedOutput()
		return string(out), err
	}
	ns := e.namespace(t)
	sized := map[string]int64{"vm-1": 1000, "vm-4": 4000}
	uids := map[string]string{}
	for name, milli := range sized {
		zero := int64(1)
		p, err := e.cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"cgwarden.io/cpu": fmt.Sprintf("%dm", milli)}},
			Spec: corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: &zero, Containers: []corev1.Container{{
				Name: "vm", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[name] = string(p.UID)
	}
	for name := range sized {
		e.podRunning(t, ns, name)
	}
	if out, err := kubectl("apply", "-k", "testdata/agent-fix"); err != nil {
		t.Fatalf("kubectl apply -k: %v\n%s", err, out)
	}
	t.Cleanup(func() { kubectl("delete", "-k", "testdata/agent-fix", "--wait=true", "--timeout=120s") })

	root, wf := cgroupRoot()
	weight := func(rel string) int64 { return readInt(t, filepath.Join(root, rel, wf)) }
	tierRel := "kubepods/besteffort"
	shares := func(m int64) int64 { return m * 1024 / 1000 }
	// The tier counts at most the node's CPUs (the default cap).
	cpus := int64(0)
	node, err := e.cs.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cpus = node.Status.Capacity.Cpu().MilliValue()
	wantTier := 2 + min(shares(1000)+shares(4000), shares(cpus))
	start := time.Now()
	poll.Until(t, 90*time.Second, "weights by size on the node's cgroups", func() (bool, string, error) {
		got := fmt.Sprintf("tier %d (want %d)", weight(tierRel), wantTier)
		ok := weight(tierRel) == wantTier
		for name, milli := range sized {
			w := weight(filepath.Join(tierRel, "pod"+uids[name]))
			got += fmt.Sprintf(", %s %d (want %d)", name, w, shares(milli))
			ok = ok && w == shares(milli)
			// The VM's container gets it too, not the pod's sandbox.
			p, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || len(p.Status.ContainerStatuses) != 1 {
				return false, "", fmt.Errorf("pod %s: %v", name, err)
			}
			id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
			cw := weight(filepath.Join(tierRel, "pod"+uids[name], id))
			got += fmt.Sprintf(" (its container %d)", cw)
			ok = ok && cw == shares(milli)
		}
		return ok, got, nil
	})
	t.Logf("weights by size %v after kubectl apply", time.Since(start).Round(time.Second))
	// It wrote them as root without any capability (components/fix).
	checkFixModeAgent(t, e)
	poll.Until(t, 60*time.Second, "the fix-mode agent Ready", func() (bool, string, error) {
		err := e.staysReady("cgwarden-system", "app.kubernetes.io/name=cgwarden", 0)
		return err == nil, fmt.Sprint(err), nil
	})
	e.keepsReady(t, "the fix overlay (testdata/agent-fix)", "cgwarden-system", "app.kubernetes.io/name=cgwarden")

	// The kubelet re-applies the tier's weight once a minute: watch a
	// little longer than that; the tier must be back at its target within
	// a second of each reset, and cgwarden must have counted the reset.
	off := time.Duration(0)
	var offSince time.Time
	deadline := time.Now().Add(75 * time.Second)
	resetSeen := false
	// A reset in the window's last moments is given its bound (and as
	// much again) after the window ends, instead of being judged before
	// the agent could answer it.
	for time.Now().Before(deadline) || !offSince.IsZero() && time.Since(offSince) < 2*time.Second {
		w := weight(tierRel)
		switch {
		case w != wantTier && offSince.IsZero():
			offSince = time.Now()
			resetSeen = true
		case w == wantTier && !offSince.IsZero():
			off = max(off, time.Since(offSince))
			offSince = time.Time{}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !offSince.IsZero() {
		t.Fatalf("the tier was left at %d since %v", weight(tierRel), offSince)
	}
	if off > time.Second {
		t.Errorf("the tier was off its target for %v after a reset, want under 1 s", off)
	}
	t.Logf("75 s watched: a reset seen on the file: %v, longest time off target %v", resetSeen, off)
	// The kubelet did reset it, and cgwarden undid that: its log says so.
	logs, err := kubectl("logs", "-n", "cgwarden-system", "ds/cgwarden")
	if err != nil {
		t.Fatalf("kubectl logs: %v\n%s", err, logs)
	}
	restored := 0
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "target restored") && strings.Contains(l, "cgroup=/kubepods/besteffort ") {
			restored++
		}
	}
	if restored == 0 {
		t.Errorf("in 75 s the agent restored no kubelet reset of the tier (the kubelet resets it once a minute); log tail:\n%s", tail(logs, 20))
	} else {
		t.Logf("the agent restored the tier %d time(s) after the kubelet reset it", restored)
	}

	// Events: the fix on each pod.
	for name := range sized {
		poll.Until(t, 30*time.Second, "an Event of the fix on "+name, func() (bool, string, error) {
			evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
			if err != nil {
				return false, "", err
			}
			var seen []string
			for _, ev := range evs.Items {
				seen = append(seen, ev.Reason)
				if ev.Source.Component == "cgwarden" && strings.HasSuffix(ev.Reason, "Fixed") {
					t.Logf("%s: %s %s", name, ev.Reason, ev.Message)
					return true, "", nil
				}
			}
			return false, strings.Join(seen, ","), nil
		})
	}
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// podRunning waits (up to 120 s) until the pod ns/name runs.
func (e *env) podRunning(t *testing.T, ns, name string) {
	t.Helper()
	poll.Until(t, 120*time.Second, "pod "+name+" running", func() (bool, string, error) {
		p, err := e.cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return p.Status.Phase == corev1.PodRunning, describe(p), nil
	})
}
