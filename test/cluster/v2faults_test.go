package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// The fault suite on the guest node: the kinds of TestClusterFaultSuite
// that a systemd node takes as its own units, and their bounds.
const (
	// defaultGuestFaultCount is CI's count (CGWARDEN_V2_FAULT_COUNT):
	// each restart once (a soak sets more: docs/reliability.md).
	defaultGuestFaultCount = 2
	// guestFaultSettle bounds the time from a unit active again to every
	// invariant holding: the kubelet's Summary needs two of its stats
	// samples after its restart, on an emulated (TCG) guest.
	guestFaultSettle = 180 * time.Second
)

// guestFaultUnits are the guest's systemd units restarted by each kind.
var guestFaultUnits = map[string]string{faultKubelet: "kubelet", faultContainerd: "containerd"}

func guestFaultCount(t *testing.T) int {
	if v := os.Getenv("CGWARDEN_V2_FAULT_COUNT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CGWARDEN_V2_FAULT_COUNT=%q: want a positive count", v)
		}
		return n
	}
	return defaultGuestFaultCount
}

// TestV2NodeFaultSuite: TestClusterFaultSuite's kubelet and containerd
// restarts on the systemd cgroup v2 node, each a `systemctl restart` of
// the guest's unit, in an order drawn from the seed (CGWARDEN_FAULT_SEED,
// as the host's suite). The fix-mode agent (testdata/agent-prom-fix:
// adoption and weights by size) runs on both nodes; on the guest, seed
// 003's misplaced busy pod (adopted into its container's scope in its
// pod's slice, through systemd) and two sized BestEffort pods (1 and 2
// CPUs, their weights and their tier's held as systemd properties).
// After the agent's first runs and after each fault, within
// guestFaultSettle, every invariant holds at once:
//
//   - the seed's processes in cri-containerd-<id>.scope beneath its pod's
//     slice, and the runtime's emptied cgroup at the root gone;
//   - the seed's container the one the runtime started (restart count 0,
//     the same ID, running: a containerd restart keeps it);
//   - the guest kubelet's own Summary gives the seed's pod a busy loop's
//     CPU;
//   - the sized pods' and their tier's weights, file and CPUWeight
//     property alike, at what the agent first held (in proportion to
//     the sizes, the tier raised off the kubelet's 1);
//   - the agent's pod on the guest Ready, never restarted.
//
// Reproduce: CGWARDEN_FAULT_SEED=<seed>; more faults:
// CGWARDEN_V2_FAULT_COUNT=<n>.
func TestV2NodeFaultSuite(t *testing.T) {
	e := cluster(t)
	guest := e.guestNode(t)
	importAgentEverywhere(t)
	seed, count := faultSeed(t), guestFaultCount(t)
	t.Logf("the guest's fault suite: seed %d, %d faults (rerun: CGWARDEN_FAULT_SEED=%d CGWARDEN_V2_FAULT_COUNT=%d go test -run 'TestV2NodeFaultSuite$' ./...)", seed, count, seed, count)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	ctx := context.Background()
	ns := e.namespace(t)
	sh := e.guestShell(t, ns, guest)

	units := map[string]string{"tier": "kubepods-besteffort.slice"}
	dirs := map[string]string{"tier": "kubepods.slice/kubepods-besteffort.slice"}
	one := int64(1)
	for _, v := range []struct{ name, size string }{{"vm-1", "1000m"}, {"vm-2", "2000m"}} {
		p, err := e.cs.CoreV1().Pods(ns).Create(ctx, onGuest(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: v.name, Labels: map[string]string{"app": v.name},
				Annotations: map[string]string{"cgwarden.io/cpu": v.size}},
			Spec: corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: &one, Containers: []corev1.Container{{
				Name: "vm", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}},
		}, guest), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		units[v.name] = "kubepods-besteffort-pod" + strings.ReplaceAll(string(p.UID), "-", "_") + ".slice"
		dirs[v.name] = dirs["tier"] + "/" + units[v.name]
	}
	uid, _ := e.seedOnGuest(t, ns, guest, sh)
	id := containerID(e.runningPods(t, ns, "seed", 1, 10*time.Second)["seed"])
	for _, name := range []string{"vm-1", "vm-2"} {
		e.runningPods(t, ns, name, 1, 240*time.Second)
	}
	leftover := "/host/cgroup/kubepods-besteffort-pod" + uid + ".slice:cri-containerd:" + id

	e.installAgent(t, "testdata/agent-prom-fix")
	var held map[string][2]string
	poll.Until(t, 180*time.Second, "the VMs' weights held in proportion to their sizes, as systemd properties", func() (bool, string, error) {
		held = sh.weights(t, units, dirs)
		w1, _ := strconv.Atoi(held["vm-1"][0])
		w2, _ := strconv.Atoi(held["vm-2"][0])
		tier, _ := strconv.Atoi(held["tier"][0])
		ok := w1 > 1 && 10*w2 >= 18*w1 && tier > 1
		for _, w := range held {
			ok = ok && w[0] == w[1]
		}
		return ok, fmt.Sprintf("%v (file, property)", held), nil
	})
	agentPod := e.agentPodOn(t, guest)
	kubelet := e.kubeletAt(t, guest)
	checks := 0
	// violations is what does not hold now; an error is what cannot come
	// right by waiting (the container started again, the agent's pod
	// replaced or restarted).
	violations := func() ([]string, error) {
		checks++
		var v []string
		if cgs, err := sh.tryProcessCgroups("seed"); err != nil {
			v = append(v, err.Error())
		} else if !inPodSlice(cgs, uid) || !allSuffixed(cgs, "/cri-containerd-"+id+".scope") {
			v = append(v, fmt.Sprintf("the seed's processes are in %q, want cri-containerd-%s.scope in its pod's slice", cgs, id))
		}
		if out, err := sh.try("test -e " + leftover + " && echo there || echo gone"); err != nil || strings.TrimSpace(out) != "gone" {
			v = append(v, fmt.Sprintf("the runtime's emptied cgroup %s: %s %v", leftover, strings.TrimSpace(out), err))
		}
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, "seed", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if len(p.Status.ContainerStatuses) != 1 {
			return nil, fmt.Errorf("the seed has %d container statuses", len(p.Status.ContainerStatuses))
		}
		cs := p.Status.ContainerStatuses[0]
		if now := strings.TrimPrefix(cs.ContainerID, "containerd://"); cs.RestartCount != 0 || now != id {
			return nil, fmt.Errorf("the seed's container was started again: restart count %d, ID %s (was %s), last state %+v", cs.RestartCount, now, id, cs.LastTerminationState)
		}
		if cs.State.Running == nil {
			v = append(v, fmt.Sprintf("the seed's container is not running: %+v", cs.State))
		}
		if code, body := kubelet("/stats/summary?only_cpu_and_memory=true"); code != 200 {
			v = append(v, fmt.Sprintf("the guest kubelet's Summary: %d %.200s", code, body))
		} else if cpu := summaryCPU(t, func(string) (int, string) { return code, body }, ns)["seed"]; cpu.pod <= 0.3e9 {
			v = append(v, fmt.Sprintf("the guest kubelet's Summary gives the seed's pod %.0f nanocores (containers %.0f), want a busy loop's", cpu.pod, cpu.containers))
		}
		if w, err := sh.tryWeights(units, dirs); err != nil {
			v = append(v, err.Error())
		} else if !reflect.DeepEqual(w, held) {
			v = append(v, fmt.Sprintf("weights (file, property) %v, want the held %v", w, held))
		}
		a, err := e.cs.CoreV1().Pods(agentPod.Namespace).Get(ctx, agentPod.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("the agent's pod on the guest: %w", err)
		}
		if a.UID != agentPod.UID || len(a.Status.ContainerStatuses) != 1 || a.Status.ContainerStatuses[0].RestartCount != 0 {
			return nil, fmt.Errorf("the agent's pod on the guest was replaced or restarted: %s", describe(a))
		}
		if !podReady(a) {
			v = append(v, "the agent's pod on the guest is not Ready: "+describe(a))
		}
		return v, nil
	}
	settle := func(after string) time.Duration {
		t.Helper()
		from := time.Now()
		var last []string
		deadline := from.Add(guestFaultSettle)
		for {
			v, err := violations()
			if err != nil {
				t.Fatalf("after %s (seed %d): %v", after, seed, err)
			}
			if len(v) == 0 {
				return time.Since(from)
			}
			last = v
			if time.Now().After(deadline) {
				t.Fatalf("after %s (seed %d), %v later:\n%s", after, seed, guestFaultSettle, strings.Join(last, "\n"))
			}
			time.Sleep(3 * time.Second)
		}
	}
	t.Logf("settled %v after the weights were held (%v)", settle("the agent's first runs").Round(100*time.Millisecond), held)

	var plan []string
	for i := range count {
		plan = append(plan, []string{faultKubelet, faultContainerd}[i%2])
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	recovery := map[string][]time.Duration{}
	for i, kind := range plan {
		sh.restart(t, guestFaultUnits[kind])
		d := settle(fmt.Sprintf("fault %d/%d %s", i+1, count, kind))
		recovery[kind] = append(recovery[kind], d)
		t.Logf("fault %d/%d %s on the guest: settled %v after", i+1, count, kind, d.Round(100*time.Millisecond))
	}
	var lines []string
	for _, kind := range []string{faultKubelet, faultContainerd} {
		ds := recovery[kind]
		lines = append(lines, fmt.Sprintf("  %-18s %2d faults, recovery p50 %v, max %v", kind, len(ds), pct(ds, 50), pct(ds, 100)))
	}
	t.Logf("the guest's fault suite, seed %d: %d faults, %d invariant checks; recovery by kind:\n%s", seed, count, checks, strings.Join(lines, "\n"))
}

// allSuffixed reports whether every one of ss ends in suffix.
func allSuffixed(ss []string, suffix string) bool {
	for _, s := range ss {
		if !strings.HasSuffix(s, suffix) {
			return false
		}
	}
	return true
}

// agentPodOn is the agent's pod on node, Ready.
func (e *env) agentPodOn(t *testing.T, node string) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	poll.Until(t, 2*time.Minute, "the agent's pod on "+node+" Ready", func() (bool, string, error) {
		l, err := e.cs.CoreV1().Pods("cgwarden-system").List(context.Background(), metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=cgwarden", FieldSelector: "spec.nodeName=" + node})
		if err != nil || len(l.Items) != 1 {
			return false, fmt.Sprintf("%d agent pods", len(l.Items)), err
		}
		got = &l.Items[0]
		return podReady(got), describe(got), nil
	})
	return got
}
