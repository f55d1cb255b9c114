package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/test/cluster/lab"
)

// The fault suite's knobs and bounds.
const (
	// faultJournal is the agent's journal on the node: the hostPath of
	// testdata/agent-faults (runFaultSuite checks the lab's directory is
	// the one that kustomization names).
	faultJournal = lab.DefaultDir + "/faults-journal"
	// faultArm is the agent's armed failpoints file on the node: the
	// hostPath of testdata/agent-faults, read and removed by the next
	// agent process (CGWARDEN_FAILPOINTS_FILE).
	faultArm = lab.DefaultDir + "/faults-arm/arm"
	// defaultFaultCount is CI's count (CGWARDEN_CLUSTER_FAULT_COUNT):
	// one of each kind, about 2 minutes (16, two of each, took 4; 24,
	// three of each, 7; a soak sets more: docs/reliability.md).
	defaultFaultCount = 8
	// faultSettle bounds the time from a fault's end (the component back,
	// the pod deleted) to every invariant holding. It allows a new agent
	// pod (image present, Ready within 60 s), one adoption interval, and
	// the kubelet's own CPU figure of an adopted pod, which needs two of
	// its stats samples after the move (10-15 s apart here), on the loaded
	// 2-core machine.
	faultSettle = 150 * time.Second
	// apiOutage is how long the API server stays away.
	apiOutage = 5 * time.Second
	// crashRuns is how long the crash-looping container runs before it
	// exits 1: long enough to be adopted (an interval), short enough to be
	// restarted several times in a run.
	crashRuns = 20 * time.Second
)

// Fault kinds.
const (
	faultKubelet    = "kubelet-restart"
	faultContainerd = "containerd-restart"
	faultAPIServer  = "apiserver-stop"
	faultAgent      = "agent-killed"
	faultChurn      = "pods-churned"
	faultReboot     = "node-rebooted"
	faultFailpoint  = "agent-failpoint"
	faultUpdate     = "agent-updated"
)

var faultKinds = []string{faultKubelet, faultContainerd, faultAPIServer, faultAgent, faultChurn, faultReboot, faultFailpoint, faultUpdate}

// failpoints are where the agent-failpoint fault kills the agent, and on
// which hit: the steps of an adoption and of a weight written that the
// suite then makes happen (internal/failpoint; the host lane's failpoint
// lane kills `fix --apply` at each of them too).
var failpoints = []string{
	"journal/before-append=kill@1", "journal/before-append=kill@2", "journal/before-append=kill@3",
	"journal/after-append=kill@1", "journal/after-append=kill@2", "journal/after-append=kill@3",
	"fix/mid-move=kill@1", "fix/after-write=kill@1",
}

// TestClusterFaultSuite: the fix-mode agent (adoption and weights, one
// node loop) on the real node, with misplaced busy pods (the misplace
// runtime), a crash-looping misplaced container and sized BestEffort
// pods, while faults come in a random order drawn from a seed: the
// kubelet restarted (it re-asserts the QoS tiers' and pods' weights on
// start), containerd restarted (its shims, and so the containers, keep
// running), the API server stopped and started, the agent killed (its pod
// deleted with grace 0, or its process SIGKILLed), pods churned (a busy
// pod deleted, a busy container killed, a sized pod deleted or made), the
// node rebooted (a power cut: the kubelet, containerd, every shim and
// container killed, every pod cgroup removed, containerd's state emptied,
// while the agent's journal stays on its hostPath; the Deployments' pods
// recreated with new UIDs meanwhile, the sized pods keeping theirs), and
// the agent killed at a failpoint (its next process armed to SIGKILL
// itself in the middle of a journal append, a move or a weight written,
// then an adoption and a weight made due). After
// each, within faultSettle, every invariant must hold at once:
//
//   - no process of a live pod in a runtime-literal cgroup (in any
//     hierarchy), and each running container's processes in its pod's
//     cgroup (the crash-looper's once it ran an interval);
//   - the kubelet's own /stats/summary gives every busy pod CPU above 0;
//   - every sized pod and its container at the weight its size gives,
//     the BestEffort tier at 2 + their shares (capped at the node's CPUs),
//     or at the kubelet's minimum when no sized pod is left;
//   - the journal (read from its hostPath) reads back, every run in it
//     finished (or cut off and resumed), runs one after another, never two
//     interleaved;
//   - the agent Ready.
//
// At the end the agent is uninstalled and `cgwarden revert --all` must
// restore what the kubelet and the runtime made: the sized pods' weights
// at the kubelet's minimum, every running misplaced container back in its
// literal cgroup, no cgroup cgwarden made left, and nothing at the
// hierarchies' roots changed. The recovery times by kind (p50/p99) are
// logged with the seed (docs/reliability.md).
//
// Reproduce: CGWARDEN_FAULT_SEED=<seed>; more faults:
// CGWARDEN_CLUSTER_FAULT_COUNT=<n>.
func TestClusterFaultSuite(t *testing.T) {
	seed, count := faultSeed(t), faultCount(t)
	t.Logf("fault suite: seed %d, %d faults (rerun: CGWARDEN_FAULT_SEED=%d CGWARDEN_CLUSTER_FAULT_COUNT=%d go test -run 'TestClusterFaultSuite$' ./...)", seed, count, seed, count)
	if v := runFaultSuite(t, seed, count, ""); len(v) > 0 {
		t.Errorf("at the end (seed %d):\n%s", seed, strings.Join(v, "\n"))
	}
}

// TestClusterFaultSuiteCatchesADroppedAppend runs the suite on the
// deliberately broken build: the agent's every journal append dropped
// (journal/before-append=skip@*, armed in its first process), no fault
// injected. It adopts and weighs as before, and the invariants checked
// while it runs hold (its journal is empty, which reads back), but
// `revert --all` has nothing to undo: the end's checks must find what it
// left. If they did not, the suite's holding would prove nothing.
func TestClusterFaultSuiteCatchesADroppedAppend(t *testing.T) {
	v := runFaultSuite(t, 1, 0, "journal/before-append=skip@*")
	if len(v) == 0 {
		t.Fatal("with every journal append dropped, every check after revert --all held: the suite cannot fail")
	}
	t.Logf("the broken build caught at the end, as it must be:\n%s", strings.Join(v, "\n"))
}

// runFaultSuite sets the suite's node up (the agent's first process armed
// with arm, when set), injects count faults in an order drawn from seed,
// with the invariants settled after each (a failure stops the test), then
// uninstalls the agent, runs `revert --all`, and returns what does not
// hold after it.
func runFaultSuite(t *testing.T, seed int64, count int, arm string) []string {
	e := cluster(t)
	if d := lab.FromEnv().Dir; d != lab.DefaultDir {
		t.Fatalf("the lab's directory is %s: testdata/agent-faults mounts the journal and the armed file from %s", d, lab.DefaultDir)
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	begun := time.Now()
	bin := buildCgwarden(t)
	importImage(t, failpointImage, "failpoints")
	hostBefore := rootEntries(t)
	// A previous run's, on a cluster left up.
	_ = os.RemoveAll(faultJournal)
	_ = os.RemoveAll(filepath.Dir(faultArm))
	t.Cleanup(func() {
		_ = os.RemoveAll(faultJournal)
		_ = os.RemoveAll(filepath.Dir(faultArm))
	})

	s := &faultSuite{t: t, e: e, rng: rng, ns: e.namespace(t), kubelet: e.kubeletClient(t), cpus: nodeMilliCPU(t, e)}
	s.root, s.wf = cgroupRoot()
	e.misplacedDeployment(t, s.ns, "busy", 2, burner)
	e.misplacedDeployment(t, s.ns, "crash", 1, fmt.Sprintf("sleep %d; exit 1", int(crashRuns.Seconds())))
	s.sized(1000)
	s.sized(2000)
	e.runningPods(t, s.ns, "busy", 2, 120*time.Second)
	if arm != "" {
		s.arm(arm)
	}
	_, _, uninstall := e.installAgent(t, "testdata/agent-faults")
	first := time.Now()
	s.settle("the agent's first runs")
	t.Logf("settled %v after the agent was Ready (setup %v in all)", time.Since(first).Round(100*time.Millisecond), time.Since(begun).Round(time.Second))

	// Every kind as often as the others, in an order from the seed.
	var plan []string
	for i := 0; i < count; i++ {
		plan = append(plan, faultKinds[i%len(faultKinds)])
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	recovery := map[string][]time.Duration{}
	faultsStart := time.Now()
	for i, kind := range plan {
		at := time.Now()
		what, end := s.inject(kind)
		s.settle(fmt.Sprintf("fault %d/%d %s (%s), seed %d", i+1, count, kind, what, seed))
		d := time.Since(end)
		recovery[kind] = append(recovery[kind], d)
		t.Logf("fault %d/%d %s (%s, %v): settled %v after", i+1, count, kind, what, end.Sub(at).Round(100*time.Millisecond), d.Round(100*time.Millisecond))
	}
	faultsTook := time.Since(faultsStart)

	// Uninstalled, then reverted: what the kubelet and the runtime made.
	uninstall()
	out, err := exec.Command(bin, "revert", "--all", "--journal-dir", faultJournal).CombinedOutput()
	if err != nil {
		t.Fatalf("cgwarden revert --all: %v\n%s", err, out)
	}
	t.Logf("cgwarden revert --all:\n%s", tail(string(out), 8))
	v := s.reverted()
	if after := rootEntries(t); !slices.Equal(after, hostBefore) {
		v = append(v, fmt.Sprintf("the hierarchies' roots changed:\nbefore %v\nafter  %v", hostBefore, after))
	}

	// The figures.
	var lines []string
	var all []time.Duration
	for _, kind := range faultKinds {
		ds := recovery[kind]
		all = append(all, ds...)
		lines = append(lines, fmt.Sprintf("  %-18s %2d faults, recovery p50 %v, p99 %v, max %v", kind, len(ds), pct(ds, 50), pct(ds, 99), pct(ds, 100)))
	}
	t.Logf("fault suite, seed %d: %d faults in %v (%d invariant checks; the whole test %v); recovery by kind:\n%s\n  %-18s %2d faults, recovery p50 %v, p99 %v, max %v",
		seed, count, faultsTook.Round(time.Second), s.checks, time.Since(begun).Round(time.Second), strings.Join(lines, "\n"),
		"all", len(all), pct(all, 50), pct(all, 99), pct(all, 100))
	return v
}

// faultSuite is the state of one run.
type faultSuite struct {
	t       *testing.T
	e       *env
	rng     *rand.Rand
	ns      string
	kubelet func(string) (int, string)
	root    string
	wf      string
	cpus    int64
	// nextVM numbers the sized pods made; churns counts the churn
	// faults (from an offset the seed chooses).
	nextVM, churns int
	// checks counts invariant evaluations.
	checks int
}

func faultSeed(t *testing.T) int64 {
	if v := os.Getenv("CGWARDEN_FAULT_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("CGWARDEN_FAULT_SEED=%q: %v", v, err)
		}
		return n
	}
	return time.Now().UnixNano()
}

func faultCount(t *testing.T) int {
	if v := os.Getenv("CGWARDEN_CLUSTER_FAULT_COUNT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CGWARDEN_CLUSTER_FAULT_COUNT=%q: want a positive count", v)
		}
		return n
	}
	return defaultFaultCount
}

func nodeMilliCPU(t *testing.T, e *env) int64 {
	node, err := e.cs.CoreV1().Nodes().Get(context.Background(), e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return node.Status.Capacity.Cpu().MilliValue()
}

// sized makes a BestEffort pod (the default runtime) declaring milli CPUs.
func (s *faultSuite) sized(milli int64) {
	s.t.Helper()
	s.nextVM++
	one := int64(1)
	_, err := s.e.cs.CoreV1().Pods(s.ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("vm-%d", s.nextVM), Labels: map[string]string{"app": "vm"},
			Annotations: map[string]string{"cgwarden.io/cpu": fmt.Sprintf("%dm", milli)}},
		Spec: corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: &one, Containers: []corev1.Container{{
			Name: "vm", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
}

// restart stops a component of the node and starts it again as the lab
// started it, waiting until it is ready.
func (s *faultSuite) restart(name string) {
	s.t.Helper()
	if _, err := lab.FromEnv().Restart(context.Background(), name); err != nil {
		s.t.Fatalf("restart %s: %v", name, err)
	}
}

// labDo runs one of the lab's node operations, failing the test on error.
func (s *faultSuite) labDo(what string, err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

// inject makes one fault of kind, says what it did, and returns when the
// fault is over (the component back, the pod deleted or made, the
// process killed): recovery is measured from then. A killed process is
// waited for until the kubelet reports its container restarted, so that
// the invariants are not read off a status that has not seen the kill.
func (s *faultSuite) inject(kind string) (what string, end time.Time) {
	s.t.Helper()
	ctx := context.Background()
	switch kind {
	case faultKubelet:
		s.restart(lab.Kubelet)
		return "stopped and started; node Ready", time.Now()
	case faultContainerd:
		s.restart(lab.Containerd)
		return "stopped and started; shims kept running", time.Now()
	case faultAPIServer:
		l := lab.FromEnv()
		s.labDo("stop the API server", l.Stop(lab.APIServer, -1))
		time.Sleep(apiOutage)
		_, err := l.StartAgain(ctx, lab.APIServer)
		s.labDo("start the API server", err)
		return fmt.Sprintf("away %v, then ready", apiOutage), time.Now()
	case faultAgent:
		p := s.agentPod()
		// A container killed a third time would wait for the kubelet's
		// back-off (up to 5 min): a pod that was killed twice is deleted.
		if s.rng.IntN(2) == 0 || p.Status.ContainerStatuses[0].RestartCount >= 2 {
			zero := int64(0)
			if err := s.e.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				s.t.Fatal(err)
			}
			return "its pod deleted with grace 0", time.Now()
		}
		c := p.Status.ContainerStatuses[0]
		id := strings.TrimPrefix(c.ContainerID, "containerd://")
		ps := procs(filepath.Join(s.root, "kubepods", "burstable", "pod"+string(p.UID), id))
		if len(ps) == 0 {
			s.t.Fatalf("the agent's container %.12s has no process in its cgroup", id)
		}
		for _, pid := range ps {
			_ = syscall.Kill(atoi(pid), syscall.SIGKILL)
		}
		end = time.Now()
		s.restarted(p.Namespace, p.Name, id, c.RestartCount)
		return fmt.Sprintf("its process SIGKILLed (%s)", strings.Join(ps, " ")), end
	case faultChurn:
		// The three ways of churning take turns, from a point the seed
		// chooses, so that a short run has each.
		if s.churns == 0 {
			s.churns = 1 + s.rng.IntN(3)
		}
		n := s.churns % 3
		s.churns++
		p := s.pick("busy")
		if n == 1 && p.Status.ContainerStatuses[0].RestartCount >= 2 {
			n = 0 // as the agent: no third kill in one pod (the back-off)
		}
		switch n {
		case 0:
			if err := s.e.cs.CoreV1().Pods(s.ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
				s.t.Fatal(err)
			}
			return "busy pod " + p.Name + " deleted", time.Now()
		case 1:
			id := containerID(p)
			for _, dir := range []string{filepath.Join(s.root, "kubepods", "besteffort", "pod"+string(p.UID), id), filepath.Join(s.root, literalName(string(p.UID), id))} {
				for _, pid := range procs(dir) {
					_ = syscall.Kill(atoi(pid), syscall.SIGKILL)
				}
			}
			end = time.Now()
			s.restarted(s.ns, p.Name, id, p.Status.ContainerStatuses[0].RestartCount)
			return "busy container of " + p.Name + " killed", end
		default:
			return s.churnSized(), time.Now()
		}
	case faultReboot:
		s.labDo("power off", lab.FromEnv().PowerOff())
		// While the node is down, the Deployments' pods are deleted and
		// made again with new UIDs (their old cgroups, containers and
		// PIDs gone with the power); the sized pods are bare pods that
		// keep their UIDs and get new containers at boot.
		var again []string
		for _, app := range []string{"busy", "crash"} {
			for _, p := range s.pods(app) {
				zero := int64(0)
				if err := s.e.cs.CoreV1().Pods(s.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
					s.t.Fatal(err)
				}
				again = append(again, p.Name)
			}
		}
		s.labDo("power on", lab.FromEnv().PowerOn(ctx))
		return fmt.Sprintf("power cut, pods %s made again with new UIDs, booted; node Ready", strings.Join(again, " ")), time.Now()
	case faultFailpoint:
		return s.failpoint()
	case faultUpdate:
		return s.update()
	}
	s.t.Fatalf("unknown fault kind %q", kind)
	return "", time.Time{}
}

// churnSized deletes a sized pod or makes one (of 500m, 1 or 2 CPUs),
// between one and two of them, as the seed chooses, and says which.
func (s *faultSuite) churnSized() string {
	s.t.Helper()
	vms := s.pods("vm")
	if len(vms) == 2 || len(vms) == 1 && s.rng.IntN(2) == 0 {
		p := vms[s.rng.IntN(len(vms))]
		if err := s.e.cs.CoreV1().Pods(s.ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
			s.t.Fatal(err)
		}
		return fmt.Sprintf("sized pod %s deleted (%d left)", p.Name, len(vms)-1)
	}
	milli := []int64{500, 1000, 2000}[s.rng.IntN(3)]
	s.sized(milli)
	return fmt.Sprintf("sized pod vm-%d of %dm made (%d now)", s.nextVM, milli, len(vms)+1)
}

// failpoint arms the agent's next process to SIGKILL itself at a
// failpoint the seed chooses, makes that process start (the agent pod
// deleted with grace 0: a new pod, with no restart back-off yet), makes an
// adoption due (a busy container killed, or its pod deleted) and a weight
// due (a sized pod made or deleted), and waits until the point fired: the
// agent's container restarted, its previous log naming the point. The
// restarted process finds the armed file gone and runs clean, resuming
// what the killed one left.
func (s *faultSuite) failpoint() (what string, end time.Time) {
	s.t.Helper()
	ctx := context.Background()
	spec := failpoints[s.rng.IntN(len(failpoints))]
	point, _, _ := strings.Cut(spec, "=")
	s.arm(spec)
	old := s.agentPod()
	zero := int64(0)
	if err := s.e.cs.CoreV1().Pods(old.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		s.t.Fatal(err)
	}
	poll.Until(s.t, 90*time.Second, "the new agent process reading the armed file "+faultArm, func() (bool, string, error) {
		_, err := os.Stat(faultArm)
		return os.IsNotExist(err), fmt.Sprint(err), nil
	})
	var agent *corev1.Pod
	for _, p := range s.agentPods() {
		if p.Name != old.Name {
			agent = p
		}
	}
	if agent == nil {
		s.t.Fatal("no new agent pod after the armed file was read")
	}

	// Work that reaches the point: an adoption and a weight.
	p := s.pick("busy")
	made := "busy container of " + p.Name + " killed"
	if p.Status.ContainerStatuses[0].RestartCount >= 2 {
		if err := s.e.cs.CoreV1().Pods(s.ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			s.t.Fatal(err)
		}
		made = "busy pod " + p.Name + " deleted"
	} else {
		id := containerID(p)
		for _, dir := range []string{filepath.Join(s.root, "kubepods", "besteffort", "pod"+string(p.UID), id), filepath.Join(s.root, literalName(string(p.UID), id))} {
			for _, pid := range procs(dir) {
				_ = syscall.Kill(atoi(pid), syscall.SIGKILL)
			}
		}
	}
	made += ", " + s.churnSized()

	// Fired: the container restarted, and its previous log says where.
	poll.Until(s.t, 120*time.Second, fmt.Sprintf("the agent killed at %s (%s)", spec, made), func() (bool, string, error) {
		p, err := s.e.cs.CoreV1().Pods(agent.Namespace).Get(ctx, agent.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) != 1 {
			return false, fmt.Sprint(err), nil
		}
		if c := p.Status.ContainerStatuses[0]; c.RestartCount == 0 {
			return false, describe(p), nil
		}
		end = time.Now()
		logs, err := runKubectl(s.e, "logs", "-n", p.Namespace, p.Name, "--previous")
		if err != nil {
			return false, logs, nil
		}
		if !strings.Contains(logs, "cgwarden failpoint "+point+": kill") {
			return false, "", fmt.Errorf("the agent's container restarted, but its previous log does not name the failpoint %s:\n%s", point, tail(logs, 10))
		}
		return true, "", nil
	})
	return fmt.Sprintf("%s, then %s; fired", spec, made), end
}

// restarted waits until the kubelet reports the pod's container, killed,
// as restarted (its restart count past was, or another container ID).
func (s *faultSuite) restarted(ns, name, id string, was int32) {
	s.t.Helper()
	poll.Until(s.t, 60*time.Second, "the kubelet seeing the kill of "+ns+"/"+name, func() (bool, string, error) {
		p, err := s.e.cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) != 1 {
			return false, fmt.Sprint(err), nil
		}
		c := p.Status.ContainerStatuses[0]
		return c.RestartCount > was || strings.TrimPrefix(c.ContainerID, "containerd://") != id, describe(p), nil
	})
}

// pods lists the test's live pods of an app (not being deleted).
func (s *faultSuite) pods(app string) []*corev1.Pod {
	s.t.Helper()
	l, err := s.e.cs.CoreV1().Pods(s.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []*corev1.Pod
	for i := range l.Items {
		if l.Items[i].DeletionTimestamp == nil {
			out = append(out, &l.Items[i])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// pick chooses a running pod of app.
func (s *faultSuite) pick(app string) *corev1.Pod {
	s.t.Helper()
	var running []*corev1.Pod
	for _, p := range s.pods(app) {
		if containerID(p) != "" {
			running = append(running, p)
		}
	}
	if len(running) == 0 {
		s.t.Fatalf("no running pod of %s to churn (the suite churns settled pods only)", app)
	}
	return running[s.rng.IntN(len(running))]
}

func (s *faultSuite) agentPod() *corev1.Pod {
	s.t.Helper()
	ps := s.agentPods()
	for _, p := range ps {
		if len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil {
			return p
		}
	}
	s.t.Fatalf("no running agent pod (%d pods)", len(ps))
	return nil
}

// update rolls the agent's DaemonSet out again (its pod template's
// restartedAt annotation, as `kubectl rollout restart` sets it) and
// waits until the rollout is done: one pod, of the new template, Ready.
// The shipped strategy is maxSurge 10% (one node here), maxUnavailable 0, so the new agent
// starts beside the old one, waits on the node's agent lock in standby,
// and fixes once the old one exits: two agents on the node at once,
// which the journal's invariant (runs never interleaved) and the weights'
// checks then judge. It says whether the two were seen running at once.
func (s *faultSuite) update() (what string, end time.Time) {
	s.t.Helper()
	ctx := context.Background()
	dss := s.e.cs.AppsV1().DaemonSets("cgwarden-system")
	both, stop := s.e.agentsAtOnce(s.t)
	defer stop()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	ds, err := dss.Patch(ctx, "cgwarden", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	gen := ds.Generation
	poll.Until(s.t, 150*time.Second, "the agent's rollout", func() (bool, string, error) {
		ds, err := dss.Get(ctx, "cgwarden", metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		st := ds.Status
		done := st.ObservedGeneration >= gen && st.UpdatedNumberScheduled == st.DesiredNumberScheduled &&
			st.NumberAvailable == st.DesiredNumberScheduled && st.CurrentNumberScheduled == st.DesiredNumberScheduled &&
			len(s.agentPods()) == int(st.DesiredNumberScheduled)
		return done, fmt.Sprintf("%+v", st), nil
	})
	end = time.Now()
	select {
	case <-both:
		return "rolled out with a surge: two agents ran on the node at once", end
	default:
		return "rolled out; the old pod went before the new one ran (no surge seen)", end
	}
}

// arm writes failpoints for the agent's next process to read (and
// remove).
func (s *faultSuite) arm(spec string) {
	s.t.Helper()
	if err := os.MkdirAll(filepath.Dir(faultArm), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(faultArm, []byte(spec+"\n"), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// agentPods lists the agent's pods that are not being deleted.
func (s *faultSuite) agentPods() []*corev1.Pod {
	s.t.Helper()
	l, err := s.e.cs.CoreV1().Pods("cgwarden-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cgwarden"})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []*corev1.Pod
	for i := range l.Items {
		if l.Items[i].DeletionTimestamp == nil {
			out = append(out, &l.Items[i])
		}
	}
	return out
}

// settle polls the invariants every second until they all hold at once,
// or fails the test after faultSettle with what did not hold.
func (s *faultSuite) settle(after string) {
	s.t.Helper()
	deadline := time.Now().Add(faultSettle)
	for {
		v := s.violations()
		s.checks++
		if len(v) == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("after %s: not settled within %v:\n%s", after, faultSettle, strings.Join(v, "\n"))
		}
		time.Sleep(time.Second)
	}
}

// violations lists the invariants that do not hold now.
func (s *faultSuite) violations() []string {
	ctx := context.Background()
	all, err := s.e.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"listing pods: " + err.Error()}
	}
	var out []string
	shares := func(m int64) uint64 { return fairness.MilliCPUToShares(m) }
	var sum int64
	busy := map[string]bool{}
	live := map[string]int{}
	for i := range all.Items {
		if all.Items[i].DeletionTimestamp == nil {
			live[all.Items[i].Labels["app"]]++
		}
	}
	// A deleted pod's replacement counts from when its Deployment made it.
	if live["busy"] != 2 || live["crash"] != 1 {
		out = append(out, fmt.Sprintf("%d busy pods and %d crash-looping, want 2 and 1", live["busy"], live["crash"]))
	}
	for i := range all.Items {
		p := &all.Items[i]
		if p.DeletionTimestamp != nil {
			out = append(out, "pod "+p.Name+" is being deleted")
			continue
		}
		id := containerID(p)
		app := p.Labels["app"]
		// Runtime-literal cgroups of a live pod hold no process in any
		// hierarchy the kubelet reads a pod's figures and limits from.
		for _, l := range literalsOf(s.t, map[string]bool{string(p.UID): true}) {
			if !podHierarchy(l) {
				continue
			}
			if ps := procs(l); len(ps) > 0 {
				out = append(out, fmt.Sprintf("pod %s: processes %v in %s", p.Name, ps, l))
			}
		}
		if id == "" {
			if app != "crash" {
				out = append(out, fmt.Sprintf("pod %s: not running (%s)", p.Name, describe(p)))
			}
			continue
		}
		started := p.Status.ContainerStatuses[0].State.Running.StartedAt.Time
		if app == "crash" && time.Since(started) < agentInterval+adoptionSlack {
			continue // not yet due for adoption
		}
		if ps := procs(filepath.Join(s.root, "kubepods", "besteffort", "pod"+string(p.UID), id)); len(ps) == 0 {
			out = append(out, fmt.Sprintf("pod %s: no process of container %.12s in its pod's cgroup", p.Name, id))
		}
		switch app {
		case "busy":
			busy[p.Name] = true
		case "vm":
			m, err := strconv.ParseInt(strings.TrimSuffix(p.Annotations["cgwarden.io/cpu"], "m"), 10, 64)
			if err != nil {
				return []string{fmt.Sprintf("pod %s: size %q: %v", p.Name, p.Annotations["cgwarden.io/cpu"], err)}
			}
			sum += m
			want := s.podWeight(shares(m))
			for _, rel := range []string{"pod" + string(p.UID), filepath.Join("pod"+string(p.UID), id)} {
				if got := s.weight(filepath.Join("kubepods", "besteffort", rel)); got != strconv.FormatUint(want, 10) {
					out = append(out, fmt.Sprintf("sized pod %s (%dm): %s weighs %s, want %d", p.Name, m, rel, got, want))
				}
			}
		}
	}
	tier := uint64(fairness.MinShares) + shares(min(sum, s.cpus))
	if sum == 0 {
		tier = fairness.MinShares
	}
	if got, want := s.weight("kubepods/besteffort"), strconv.FormatUint(s.podWeight(tier), 10); got != want {
		out = append(out, fmt.Sprintf("the BestEffort tier weighs %s, want %s (sized pods %dm, node %dm)", got, want, sum, s.cpus))
	}
	// The kubelet's own figure of each busy pod's CPU.
	if code, body := s.kubelet("/stats/summary?only_cpu_and_memory=true"); code != 200 {
		out = append(out, fmt.Sprintf("kubelet /stats/summary: %d %.100s", code, body))
	} else {
		cpu := summaryCPU(s.t, func(string) (int, string) { return code, body }, s.ns)
		for name := range busy {
			if v, ok := cpu[name]; !ok || v.pod <= 0 {
				out = append(out, fmt.Sprintf("busy pod %s: the kubelet's pod CPU %v (its containers %v)", name, v.pod, v.containers))
			}
		}
	}
	out = append(out, s.journalViolations()...)
	a, err := s.e.cs.CoreV1().Pods("cgwarden-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cgwarden"})
	switch {
	case err != nil:
		out = append(out, "listing the agent: "+err.Error())
	case len(a.Items) != 1 || !podReady(&a.Items[0]):
		out = append(out, fmt.Sprintf("the agent not Ready (%d pods)", len(a.Items)))
	}
	return out
}

// podHierarchy reports whether a cgroup is in a hierarchy whose pod
// cgroup the kubelet reads or limits, which adoption moves processes in:
// on v1 cpu, cpuacct, memory and pids (not blkio, cpuset, devices,
// freezer, the named systemd one or the hybrid unified one, where the
// runtime's cgroup stays as it made it); on v2 the one hierarchy.
func podHierarchy(cg string) bool {
	rel, err := filepath.Rel("/sys/fs/cgroup", cg)
	if err != nil {
		return false
	}
	h, _, nested := strings.Cut(rel, "/")
	if !nested {
		return true // at the root of a v2 host's one hierarchy
	}
	return slices.Contains([]string{"cpu", "cpuacct", "cpu,cpuacct", "memory", "pids"}, h)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil
		}
	}
	return false
}

// journalViolations reads the agent's journal from its hostPath, whole
// lines only (the agent may be appending): it must read back; every run
// finished, or cut off and continued (a Resume of the same run); and runs
// come one after another, never two interleaved (two writers, or two
// agents, writing at once).
func (s *faultSuite) journalViolations() []string {
	j := journal.New(faultJournal)
	defer j.Close()
	entries, err := j.Snapshot()
	if err != nil {
		return []string{"journal: " + err.Error()}
	}
	var out []string
	for _, r := range journal.Applies(entries) {
		if !r.Ended && !r.RevertStarted {
			out = append(out, fmt.Sprintf("journal: run %s not finished", r.ID))
		}
	}
	open := ""
	for _, e := range entries {
		switch e.Type {
		case journal.Begin, journal.Resume, journal.RevertBegin:
			open = e.Apply
		default:
			if e.Apply != open {
				return append(out, fmt.Sprintf("journal: entry %d (%s) of run %s inside run %s: two writers interleaved", e.Seq, e.Type, e.Apply, open))
			}
		}
	}
	return out
}

// reverted checks the node after `revert --all`: every running sized pod
// and its container back at the kubelet's and the runtime's minimum
// weight, the tier at the minimum, and every running misplaced container
// back in its runtime-literal cgroup, with no cgroup cgwarden made left
// for it in the pod.
func (s *faultSuite) reverted() []string {
	var out []string
	minimum := strconv.FormatUint(s.podWeight(fairness.MinShares), 10)
	if got := s.weight("kubepods/besteffort"); got != minimum {
		out = append(out, fmt.Sprintf("the BestEffort tier weighs %s, want the kubelet's %s", got, minimum))
	}
	for _, app := range []string{"vm", "busy", "crash"} {
		for _, p := range s.pods(app) {
			id := containerID(p)
			if id == "" {
				continue
			}
			home := filepath.Join("kubepods", "besteffort", "pod"+string(p.UID), id)
			if app == "vm" {
				for _, rel := range []string{filepath.Dir(home), home} {
					if got := s.weight(rel); got != minimum {
						out = append(out, fmt.Sprintf("sized pod %s: %s weighs %s, want the kubelet's %s", p.Name, rel, got, minimum))
					}
				}
				continue
			}
			if _, err := os.Stat(filepath.Join(s.root, home)); err == nil {
				out = append(out, fmt.Sprintf("pod %s: the cgroup cgwarden made for container %.12s is left", p.Name, id))
			}
			// (The crash-looper's container may have exited since it was
			// listed.)
			if app == "busy" && len(procs(filepath.Join(s.root, literalName(string(p.UID), id)))) == 0 {
				out = append(out, fmt.Sprintf("pod %s: container %.12s not back in its literal cgroup", p.Name, id))
			}
		}
	}
	return out
}

// weight reads the weight file of a cgroup of the cpu tree ("" when gone).
func (s *faultSuite) weight(rel string) string {
	b, err := os.ReadFile(filepath.Join(s.root, rel, s.wf))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// podWeight is what the kubelet writes for a pod or tier of these shares:
// the shares on v1, the linear conversion on v2 (the suite's sized
// containers are checked the same way: on v2 the runtime's conversion
// may differ, and the lane runs v1).
func (s *faultSuite) podWeight(shares uint64) uint64 {
	if s.wf == "cpu.weight" {
		return fairness.SharesToWeightLinear(shares)
	}
	return shares
}

// pct is the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))].Round(100 * time.Millisecond)
}

// The suite's percentile and its choice of hierarchies (need no cluster).
func TestFaultSuiteHelpers(t *testing.T) {
	ds := []time.Duration{5 * time.Second, time.Second, 3 * time.Second, 2 * time.Second, 4 * time.Second}
	for p, want := range map[int]time.Duration{50: 3 * time.Second, 99: 5 * time.Second, 100: 5 * time.Second, 1: time.Second} {
		if got := pct(ds, p); got != want {
			t.Errorf("p%d of %v = %v, want %v", p, ds, got, want)
		}
	}
	if got := pct(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v", got)
	}
	lit := "kubepods-besteffort-pod1.slice:cri-containerd:abc"
	for cg, want := range map[string]bool{
		"/sys/fs/cgroup/cpu/" + lit: true, "/sys/fs/cgroup/cpuacct/" + lit: true, "/sys/fs/cgroup/memory/" + lit: true,
		"/sys/fs/cgroup/pids/" + lit: true, "/sys/fs/cgroup/" + lit: true, "/sys/fs/cgroup/blkio/" + lit: false,
		"/sys/fs/cgroup/unified/" + lit: false, "/sys/fs/cgroup/systemd/" + lit: false, "/elsewhere/" + lit: false,
	} {
		if got := podHierarchy(cg); got != want {
			t.Errorf("podHierarchy(%s) = %v, want %v", cg, got, want)
		}
	}
}
