package cluster

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// manyPods is how many misplaced pods TestAgentEventsBounded makes at
// once: 50 in CI (100 findings, five scans' worth at 20 per scan, so
// the node's ManyFindings Event is exercised), CGWARDEN_CLUSTER_MANY_PODS
// up to 105 for a soak (the kubelet's default limit is 110 pods).
func manyPods(t *testing.T) int {
	if s := os.Getenv("CGWARDEN_CLUSTER_MANY_PODS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 105 {
			t.Fatalf("CGWARDEN_CLUSTER_MANY_PODS=%q: want 1..105", s)
		}
		return n
	}
	return 50
}

// eventTally counts the Events cgwarden made about the test's pods, by
// pod and reason (Event.Count summed: the correlator aggregates a repeat
// into the count of the first), and those it made on the node since a
// time, by reason: ManyFindings, and findings that name one of the
// test's pods (a pod the agent's scan did not know by name is reported
// on the node, its subject naming the pod by namespace/name or UID).
// Node Events about other pods — another test's, torn down while this
// one runs, whose containers outlive their pod's API object — are
// listed in foreign, not counted.
type eventTally struct {
	byPodReason map[string]int
	byReason    map[string]int      // the pods', all together
	node        map[string]int      // on the node
	nodeSeen    map[string][]string // their messages, by reason
	foreign     []string            // node findings about no pod of the test
	total       int
	repeats     []string // Events of a pod and reason seen more than once
}

// newIn names what a later tally has that t had not: pod and reason (or
// node and reason) with the counts before and after.
func (t eventTally) newIn(later eventTally) string {
	var out []string
	for k, n := range later.byPodReason {
		if n != t.byPodReason[k] {
			out = append(out, fmt.Sprintf("pod %s %d→%d", k, t.byPodReason[k], n))
		}
	}
	for k, n := range later.node {
		if n != t.node[k] {
			out = append(out, fmt.Sprintf("node %s %d→%d (%s)", k, t.node[k], n, strings.Join(later.nodeSeen[k], "; ")))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func (e *env) tallyEvents(t *testing.T, ns string, pods map[string]*corev1.Pod, since time.Time) eventTally {
	t.Helper()
	ctx := context.Background()
	out := eventTally{byPodReason: map[string]int{}, byReason: map[string]int{}, node: map[string]int{}, nodeSeen: map[string][]string{}}
	evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string][]string{}
	for _, ev := range evs.Items {
		if ev.Source.Component != "cgwarden" || ev.InvolvedObject.Kind != "Pod" {
			continue
		}
		n := max(int(ev.Count), 1)
		k := ev.InvolvedObject.Name + " " + ev.Reason
		out.byPodReason[k] += n
		out.byReason[ev.Reason] += n
		out.total += n
		seen[k] = append(seen[k], fmt.Sprintf("count %d, first %s, last %s: %.200s", ev.Count,
			ev.FirstTimestamp.Format(time.TimeOnly), ev.LastTimestamp.Format(time.TimeOnly), ev.Message))
	}
	for k, n := range out.byPodReason {
		if n > 1 {
			out.repeats = append(out.repeats, k+":\n\t"+strings.Join(seen[k], "\n\t"))
		}
	}
	sort.Strings(out.repeats)
	// Node Events go to the default namespace (the kubelet's convention).
	nodeEvs, err := e.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range nodeEvs.Items {
		if ev.Source.Component == "cgwarden" && !ev.LastTimestamp.Time.Before(since.Truncate(time.Second)) {
			if ev.Reason != "ManyFindings" && !namesAPod(ev.Message, ns, pods) {
				out.foreign = append(out.foreign, fmt.Sprintf("%s (count %d, last %s): %.300s",
					ev.Reason, ev.Count, ev.LastTimestamp.Format(time.TimeOnly), ev.Message))
				continue
			}
			n := max(int(ev.Count), 1)
			out.node[ev.Reason] += n
			out.nodeSeen[ev.Reason] = append(out.nodeSeen[ev.Reason], fmt.Sprintf("count %d, last %s: %.300s",
				ev.Count, ev.LastTimestamp.Format(time.TimeOnly), ev.Message))
			out.total += n
		}
	}
	return out
}

// namesAPod reports whether a node Event's message names one of pods:
// by namespace/name (audit.Subject's form when the name is known) or by
// UID.
func namesAPod(msg, ns string, pods map[string]*corev1.Pod) bool {
	if strings.Contains(msg, " "+ns+"/") {
		return true
	}
	for _, p := range pods {
		if strings.Contains(msg, string(p.UID)) {
			return true
		}
	}
	return false
}

// TestAgentEventsBounded: 50 pods misplaced at once (a Deployment of 50
// tiny sleep containers under the misplace runtime), then the agent with
// --events in fix mode. internal/events promises: a finding is reported
// when it first appears, never at every scan; at most 20 (MaxPerScan)
// finding Events per scan and one ManyFindings Event on the node for the
// rest; and each applied fix one Event on its pod. So: for each pod at
// most one Event per finding's reason and exactly one
// CgwardenMisplacedContainerFixed (each container is adopted once); at
// most one ManyFindings per 20 finding Events (a scan that sends one has
// sent 20); and once the Events have settled, nothing new for four more
// intervals.
func TestAgentEventsBounded(t *testing.T) {
	e := cluster(t)
	importAgentImage(t)
	root, _ := cgroupRoot()
	n := manyPods(t)
	ns := e.namespace(t)
	start := time.Now()
	e.misplacedDeployment(t, ns, "many", int32(n), "exec sleep 3600")
	pods := e.runningPods(t, ns, "many", n, 8*time.Minute)
	t.Logf("%d misplaced pods running %v after the Deployment was made", n, time.Since(start).Round(time.Second))
	for _, p := range pods {
		if len(procs(root+"/"+literalName(string(p.UID), containerID(p)))) == 0 {
			t.Fatalf("pod %s is not misplaced", p.Name)
		}
	}
	t.Cleanup(func() {
		// Wait for the pods to go, so that the next test does not share
		// the node with 100 pods being torn down.
		from := time.Now()
		_ = e.cs.AppsV1().Deployments(ns).Delete(context.Background(), "many", metav1.DeleteOptions{})
		poll.Until(t, 5*time.Minute, "the many pods gone", func() (bool, string, error) {
			l, err := e.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return false, "", err
			}
			return len(l.Items) == 0, fmt.Sprintf("%d left", len(l.Items)), nil
		})
		t.Logf("the %d pods deleted in %v", n, time.Since(from).Round(time.Second))
	})

	installed := time.Now()
	_, ready, _ := e.installAgent(t, "testdata/agent-adopt-v1")
	poll.Until(t, 3*time.Minute, "every pod adopted", func() (bool, string, error) {
		left := 0
		for _, p := range pods {
			if ok, _ := adopted(root, p, containerID(p)); !ok {
				left++
			}
		}
		return left == 0, fmt.Sprintf("%d not adopted", left), nil
	})
	t.Logf("all %d adopted %v after the agent was Ready", n, time.Since(ready).Round(100*time.Millisecond))

	// The Events settle: the same total for four intervals of the
	// clock (at most 20 finding Events per scan spread 2 findings × n
	// pods over n/10 scans, and client-go's recorder retries a failed
	// write 10 s later, which a loaded API server makes happen).
	var settled eventTally
	last, since := -1, time.Now()
	poll.Until(t, 4*time.Minute, "the Events settled", func() (bool, string, error) {
		settled = e.tallyEvents(t, ns, pods, installed)
		if settled.total != last {
			last, since = settled.total, time.Now()
		}
		time.Sleep(agentInterval - time.Second)
		return time.Since(since) >= 4*agentInterval, fmt.Sprintf("%d Events", settled.total), nil
	})
	settledAt := time.Since(ready).Round(time.Second)
	time.Sleep(4 * agentInterval)
	after := e.tallyEvents(t, ns, pods, installed)
	if after.total != settled.total {
		t.Errorf("Events kept coming: %d, then %d after %v more; new: %s", settled.total, after.total, 4*agentInterval, settled.newIn(after))
	}
	for _, p := range pods {
		if fx := after.byPodReason[p.Name+" CgwardenMisplacedContainerFixed"]; fx != 1 {
			t.Errorf("pod %s: %d CgwardenMisplacedContainerFixed Events, want 1 (its container was adopted once)", p.Name, fx)
		}
	}
	for _, r := range after.repeats {
		t.Errorf("an Event repeated: %s", r)
	}
	findings := after.total - after.byReason["CgwardenMisplacedContainerFixed"] - after.node["ManyFindings"]
	if many := after.node["ManyFindings"]; many > findings/20 {
		t.Errorf("%d ManyFindings Events on the node for %d finding Events, want at most one per 20", many, findings)
	}
	for _, f := range after.foreign {
		t.Logf("not counted, a node Event about no pod of this test: %s", f)
	}
	t.Logf("%d pods misplaced at once: %d Events in all, settled %v after the agent was Ready; on the pods %v; on the node %v; none new in the %v after",
		n, after.total, settledAt, after.byReason, after.node, 4*agentInterval)
}
