package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// The lane's second node: the systemd guest (scripts/vmtest --node with
// VMTEST_JOIN), systemd as PID 1 on pure cgroup v2, containerd 2.4.2 with
// SystemdCgroup, the kubelet with the systemd driver. It registers as
// lab.GuestNode (127.0.0.2), labelled and tainted guestNodeLabel=
// v2-systemd; QEMU forwards the host's 127.0.0.2:10250 (its kubelet),
// :7000 (an image import socket) and :9530 (its agent, which listens on
// its node's address: --listen-ip) to it. The tests named
// TestV2Node run only while it has joined (scripts/test's v2 node phase
// of the cluster lane); the rest of the lane runs before it joins.
const (
	guestNodeLabel = "cgwarden.io/lane-node"
	guestNodeValue = "v2-systemd"
	guestImport    = "127.0.0.2:7000"
)

// guestNode returns the joined guest's Node name, or skips the test when
// no guest has joined (fails instead with CGWARDEN_REQUIRE_REAL=1).
func (e *env) guestNode(t *testing.T) string {
	t.Helper()
	nodes, err := e.cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: guestNodeLabel + "=" + guestNodeValue})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 1 {
		msg := fmt.Sprintf("%d nodes labelled %s=%s: the systemd guest has not joined the lane (scripts/test's v2 node phase: VMTEST_JOIN=$CGWARDEN_CLUSTER_GUEST_KIT scripts/vmtest --node)", len(nodes.Items), guestNodeLabel, guestNodeValue)
		if os.Getenv("CGWARDEN_REQUIRE_REAL") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	n := nodes.Items[0]
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			t.Fatalf("the guest node %s is not Ready: %s", n.Name, c.Message)
		}
	}
	// The guest's root filesystem is a tmpfs, which the kubelet cannot
	// measure (its kubelet-config.yaml: localStorageCapacityIsolation
	// false), so it declares no ephemeral-storage and the scheduler keeps
	// every pod that requests some (the agent does) off it. The lane
	// declares what a node's disk would: the kubelet keeps a capacity it
	// does not set itself (pkg/kubelet/nodestatus MachineInfo, v1.37.2).
	if _, ok := n.Status.Capacity[corev1.ResourceEphemeralStorage]; !ok {
		patch := fmt.Sprintf(`{"status":{"capacity":{%[1]q:%[2]q},"allocatable":{%[1]q:%[2]q}}}`, corev1.ResourceEphemeralStorage, guestEphemeralStorage)
		if _, err := e.cs.CoreV1().Nodes().Patch(context.Background(), n.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("declaring the guest's ephemeral storage: %v", err)
		}
	}
	return n.Name
}

// guestEphemeralStorage is the ephemeral storage the lane declares for
// the guest node: a part of its tmpfs root (90% of its 3 GiB of memory).
const guestEphemeralStorage = "1Gi"

// importIntoGuest imports an OCI archive into the guest's containerd
// through its import socket (one connection, one archive; the guest's
// ctr answers on the same connection).
func importIntoGuest(t *testing.T, archive string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := net.DialTimeout("tcp", guestImport, 10*time.Second)
	if err != nil {
		t.Fatalf("the guest's image import socket: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Minute))
	if _, err := io.Copy(c, f); err != nil {
		t.Fatalf("sending %s to the guest: %v", archive, err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	out, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("the guest's import: %v", err)
	}
	if !strings.Contains(string(out), "saved") && !strings.Contains(string(out), "unpacking") {
		t.Fatalf("the guest's ctr import said: %s", out)
	}
	t.Logf("imported %s into the guest: %s", archive, strings.TrimSpace(string(out)))
}

// importAgentEverywhere imports the agent's image into both nodes'
// containerd: into the guest's once per test process (35-70 s under TCG;
// no test removes it there).
func importAgentEverywhere(t *testing.T) {
	t.Helper()
	importAgentImage(t)
	archive, err := imageArchive(agentImage, "")
	if err != nil {
		t.Fatal(err)
	}
	guestImports.Lock()
	defer guestImports.Unlock()
	if !guestImports.done[archive] {
		importIntoGuest(t, archive)
		guestImports.done[archive] = true
	}
}

// guestImports are the archives imported into the guest by this process.
var guestImports = struct {
	sync.Mutex
	done map[string]bool
}{done: map[string]bool{}}

// onGuest puts a pod on the guest node: its name, and a toleration of
// the guest's taint.
func onGuest(p *corev1.Pod, node string) *corev1.Pod {
	p.Spec.NodeName = node
	p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: guestNodeLabel, Operator: corev1.TolerationOpExists})
	return p
}

// guestShell is a probe pod on the guest node that sees the guest's
// processes and cgroups (host PID namespace, the cgroup filesystem at
// /host/cgroup, read-only): the tests' eyes on a node whose files the
// host cannot read. run executes a shell script there (kubectl exec,
// through the API server and the guest's kubelet).
type guestShell struct {
	e       *env
	ns, pod string
}

func (e *env) guestShell(t *testing.T, ns, node string) *guestShell {
	t.Helper()
	one := int64(1)
	yes := true
	p := onGuest(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "guest-shell", Namespace: ns},
		Spec: corev1.PodSpec{
			HostPID: true, HostNetwork: true, TerminationGracePeriodSeconds: &one,
			Containers: []corev1.Container{{Name: "sh", Image: busybox, ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sleep", "86400"},
				SecurityContext: &corev1.SecurityContext{Privileged: &yes},
				VolumeMounts:    []corev1.VolumeMount{{Name: "cgroup", MountPath: "/host/cgroup", ReadOnly: true}}}},
			Volumes: []corev1.Volume{{Name: "cgroup", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/sys/fs/cgroup"}}}},
		},
	}, node)
	if _, err := e.cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 240*time.Second, "the guest shell running", func() (bool, string, error) {
		q, err := e.cs.CoreV1().Pods(ns).Get(context.Background(), p.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return podReady(q), describe(q), nil
	})
	return &guestShell{e: e, ns: ns, pod: p.Name}
}

func (g *guestShell) run(t *testing.T, script string) string {
	t.Helper()
	out, err := g.try(script)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// try runs a script on the guest and returns its failure (the exec's or
// the script's) as an error.
func (g *guestShell) try(script string) (string, error) {
	out, err := runKubectl(g.e, "exec", "-n", g.ns, g.pod, "--", "sh", "-c", script)
	if err != nil {
		return out, fmt.Errorf("on the guest: %.300s: %v\n%s", script, err, out)
	}
	return out, nil
}

// restart restarts a unit of the guest (the kubelet or containerd) and
// waits until it is active again in a new process. The exec that asks
// passes through both (its stream is the kubelet's, served by
// containerd), so systemd is asked to restart it 2 s later (a transient
// timer: the exec has ended by then), and the probe polls.
func (g *guestShell) restart(t *testing.T, unit string) {
	t.Helper()
	show := "nsenter -t 1 -m -u -i -n -p -- systemctl show -p MainPID -p ActiveState --value " + unit
	before := strings.Fields(g.run(t, show))
	g.run(t, "nsenter -t 1 -m -u -i -n -p -- systemd-run --quiet --on-active=2 systemctl restart "+unit)
	t0 := time.Now()
	poll.Until(t, 180*time.Second, unit+" restarted on the guest", func() (bool, string, error) {
		out, err := runKubectl(g.e, "exec", "-n", g.ns, g.pod, "--", "sh", "-c", show)
		if err != nil {
			return false, fmt.Sprintf("%v: %.200s", err, out), nil
		}
		now := strings.Fields(out)
		return len(now) == 2 && len(before) == 2 && now[0] != before[0] && now[0] != "0" && now[1] == "active", fmt.Sprintf("MainPID, ActiveState: %q before, %q now", before, now), nil
	})
	t.Logf("%s restarted on the guest in %v", unit, time.Since(t0).Round(time.Second))
}

// processCgroups are the cgroups (v2: the one line of /proc/<pid>/cgroup)
// of the guest's processes whose command line holds marker + "-loop"
// (split so that the probe's own command line does not).
func (g *guestShell) processCgroups(t *testing.T, marker string) []string {
	t.Helper()
	cgs, err := g.tryProcessCgroups(marker)
	if err != nil {
		t.Fatal(err)
	}
	return cgs
}

// tryProcessCgroups is processCgroups with the exec's failure returned.
func (g *guestShell) tryProcessCgroups(marker string) ([]string, error) {
	out, err := g.try(`for p in /proc/[0-9]*; do c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); case "$c" in *'` + marker + `''-loop'*) echo "${p#/proc/} $(cat $p/cgroup)";; esac; done`)
	if err != nil {
		return nil, err
	}
	var cgs []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && strings.HasPrefix(f[1], "0::") {
			cgs = append(cgs, strings.TrimPrefix(f[1], "0::"))
		}
	}
	return cgs, nil
}

// weights reads, for each name of units, the weight in its cgroup's file
// (dirs[name], beneath the guest's cgroup root) and systemd's CPUWeight
// property of its unit (systemctl in PID 1's namespaces): file, property.
func (g *guestShell) weights(t *testing.T, units, dirs map[string]string) map[string][2]string {
	t.Helper()
	w, err := g.tryWeights(units, dirs)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// tryWeights is weights with the exec's failure returned (the guest's
// kubelet or containerd restarting).
func (g *guestShell) tryWeights(units, dirs map[string]string) (map[string][2]string, error) {
	var script strings.Builder
	for name, unit := range units {
		fmt.Fprintf(&script, "echo %s $(cat /host/cgroup/%s/cpu.weight) $(nsenter -t 1 -m -u -i -n -p -- systemctl show -p CPUWeight --value %s);", name, dirs[name], unit)
	}
	got, err := g.try(script.String())
	if err != nil {
		return nil, err
	}
	out := map[string][2]string{}
	for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			out[f[0]] = [2]string{f[1], f[2]}
		}
	}
	return out, nil
}

// TestV2NodeJoined: the lane is a mixed fleet, the host's cgroup v1
// cgroupfs node and the guest's systemd cgroup v2 one, both Ready; the
// guest's kubelet answers through its address.
func TestV2NodeJoined(t *testing.T) {
	e := cluster(t)
	guest := e.guestNode(t)
	nodes, err := e.cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Name+" "+n.Status.NodeInfo.KernelVersion+" "+n.Status.NodeInfo.ContainerRuntimeVersion)
	}
	if len(nodes.Items) != 2 {
		t.Fatalf("nodes: %q, want the host's and the guest's", names)
	}
	t.Logf("nodes: %q", names)
	ns := e.namespace(t)
	sh := e.guestShell(t, ns, guest)
	mounts := sh.run(t, "grep cgroup /proc/1/mountinfo; cat /proc/1/comm")
	if !strings.Contains(mounts, "cgroup2") || !strings.Contains(mounts, "nsdelegate") || strings.Contains(mounts, " cgroup rw") || !strings.Contains(mounts, "systemd") {
		t.Errorf("the guest is not a systemd, pure cgroup v2 node:\n%s", mounts)
	}
	if code, body := e.kubeletAt(t, guest)("/healthz"); code != 200 {
		t.Errorf("the guest's kubelet at %s:10250: %d %s", guest, code, body)
	}
}

// seedPod is seed 003's pod: BestEffort, a busy loop, on the misplace
// runtime (its container's cgroup made at the hierarchy's root).
func seedPod(ns, name, node string) *corev1.Pod {
	one := int64(1)
	class := misplaceClass
	return onGuest(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			HostNetwork: true, RuntimeClassName: &class, TerminationGracePeriodSeconds: &one,
			Containers: []corev1.Container{{Name: "main", Image: busybox, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", ": " + name + "-loop; while :; do :; done"}}},
		},
	}, node)
}

var podSlice = regexp.MustCompile(`kubepods[^/]*\.slice/kubepods-[a-z]+-pod([0-9a-f_]+)\.slice`)

// seedOnGuest runs seed 003's pod on the guest and checks the seed's
// symptom there: its loop's processes outside their pod's slice, and the
// guest kubelet's pod CPU under half its containers'. It returns the
// kubelet's figures.
func (e *env) seedOnGuest(t *testing.T, ns, guest string, sh *guestShell) (uid string, before podCPU) {
	t.Helper()
	p, err := e.cs.CoreV1().Pods(ns).Create(context.Background(), seedPod(ns, "seed", guest), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.runningPods(t, ns, "seed", 1, 240*time.Second)
	uid = strings.ReplaceAll(string(p.UID), "-", "_")
	var cgs []string
	poll.Until(t, 60*time.Second, "the seed's loop running", func() (bool, string, error) {
		cgs = sh.processCgroups(t, "seed")
		return len(cgs) > 0, "no process", nil
	})
	if inPodSlice(cgs, uid) {
		t.Fatalf("before: the seed's processes are in their pod's slice already (%q): the misplace runtime did not misplace them", cgs)
	}
	kubelet := e.kubeletAt(t, guest)
	poll.Until(t, 90*time.Second, "the guest kubelet's figures for the seed", func() (bool, string, error) {
		before = summaryCPU(t, kubelet, ns)["seed"]
		return before.containers > 0.3e9, fmt.Sprintf("%+v", before), nil
	})
	t.Logf("before: cgroups %q; the guest kubelet's Summary: pod %.0f, containers %.0f nanocores", cgs, before.pod, before.containers)
	// The pod's own cgroup holds its sandbox only: the kubelet's pod
	// figure misses the loop.
	if before.pod > before.containers/2 {
		t.Fatalf("before: the kubelet's pod CPU is %.0f nanocores of its containers' %.0f: the seed's symptom is not reproduced", before.pod, before.containers)
	}
	return uid, before
}

// guestPodCPU waits until the guest kubelet's Summary gives pod name of ns
// the CPU of a busy loop (0.3 cores or more) and returns its figures.
func (e *env) guestPodCPU(t *testing.T, guest, ns, name string) podCPU {
	t.Helper()
	kubelet := e.kubeletAt(t, guest)
	var cpu podCPU
	poll.Until(t, 120*time.Second, "the guest kubelet's pod CPU for "+name, func() (bool, string, error) {
		cpu = summaryCPU(t, kubelet, ns)[name]
		return cpu.pod > 0.3e9, fmt.Sprintf("%+v", cpu), nil
	})
	return cpu
}

// inPodSlice reports whether every one of cgs is beneath the slice of
// the pod whose UID (with underscores) is uid, and there is one.
func inPodSlice(cgs []string, uid string) bool {
	for _, cg := range cgs {
		if m := podSlice.FindStringSubmatch(cg); m == nil || m[1] != uid {
			return false
		}
	}
	return len(cgs) > 0
}

// TestV2NodeSeedsBeforeAndAfter: both seeds on the systemd cgroup v2
// node, before and after, through the product installed from the lane's
// manifests on both nodes, and seen as users see them: the agent's own
// Summary, `kubectl top`, `kubectl cgwarden audit -A` and Prometheus's
// shipped alerts.
//
// Before: seed 003's container (the misplace runtime, started before the
// install) runs outside its pod's slice, so the guest kubelet's pod CPU
// misses it; seed 000's VM pod (BestEffort, a declared core) beside a
// Burstable pod is guaranteed next to nothing.
//
// Observe-only, with prevention (testdata/agent-prom: the nri overlay,
// its handler list edited to the lane's literal-minded runtime, the
// test's size annotations believed): the agent runs Ready on both nodes;
// on the guest its Summary, read at the Node's address where
// metrics-server and Prometheus reach it (the agent listens on its node's
// address only, which leaves the host's 127.0.0.2:9530 to QEMU's
// forward), has the pod's CPU where its processes really are, and the
// host node's agent does not list the guest's pod; a metrics-server
// reading the agents instead of the kubelets serves the misplaced pod's
// CPU at the kubelet-backed one's figure, and `kubectl top pod` shows it
// through the aggregation layer; `kubectl cgwarden audit -A` names the
// misplaced container; Prometheus (deploy/prometheus as shipped, `for:`
// shortened) scrapes both nodes' agents and fires
// CgwardenMisplacedContainer and CgwardenVMStarved for the guest node;
// the dashboard's cgroup table has a v1 cgroupfs node and a v2 systemd
// one. A pod started after the install on the same runtime is placed
// right by the plugin.
//
// Fix mode (testdata/agent-prom-fix: adoption and weights by size):
// CgwardenMisplacedContainer resolves because the figures changed, and the
// VM's guarantee of its size grows at least threefold (it cannot reach
// the alert's half on this 2-CPU systemd node: see the test's body). The agent's cgroup
// namespace is its own (containerd's on v2) and systemd mounts cgroup2
// with nsdelegate, so a write to cgroup.procs is refused (ENOENT: the
// first run of the repair, docs/systemd.md); systemd, reached through the
// bus the fix mode mounts, starts the container's scope in its pod's
// slice with its processes. After: the loop's processes in
// cri-containerd-<id>.scope beneath the pod's slice; the guest kubelet's
// own pod CPU follows them and stays through three daemon-reloads; the
// runtime's emptied cgroup is removed (the fix overlay's DAC_OVERRIDE),
// so a restart of containerd keeps the container (TestV2NodeFaultSuite).
func TestV2NodeSeedsBeforeAndAfter(t *testing.T) {
	bin := prometheusBinary(t)
	e := cluster(t)
	guest := e.guestNode(t)
	importAgentEverywhere(t)
	ctx := context.Background()
	ns := e.namespace(t)
	sh := e.guestShell(t, ns, guest)
	// Seed 000's pods first: the guest's kubelet starts them while the
	// seed's pod is made and checked.
	one := int64(1)
	for _, p := range []struct{ name, size, request string }{{"vm-1", "1000m", ""}, {"hog", "", "500m"}} {
		pod := onGuest(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{"app": p.name}},
			Spec: corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: &one, Containers: []corev1.Container{{
				Name: "vm", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}},
		}, guest)
		if p.size != "" {
			pod.Annotations = map[string]string{"cgwarden.io/cpu": p.size}
		} else {
			pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(p.request)}
		}
		if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	uid, before := e.seedOnGuest(t, ns, guest, sh)
	id := containerID(e.runningPods(t, ns, "seed", 1, 10*time.Second)["seed"])
	for _, name := range []string{"vm-1", "hog"} {
		e.runningPods(t, ns, name, 1, 240*time.Second)
	}

	e.installAgent(t, "testdata/agent-prom")
	prom := e.startPrometheus(t, bin, ns, map[string]standIn{"cgwarden-system": {namespace: "cgwarden-system"}})
	startMetricsServer(t, metricsServerAccount(t, e, ns), "")
	tok := e.nodeReaderToken(t, ns, "reader", "nodes/metrics", "nodes/stats")
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	agentAt := func(hostport string) func(string) (int, string) {
		return func(path string) (int, string) { return agentGetAt(client, hostport, path, tok) }
	}
	// At the Node's address, as metrics-server and Prometheus reach it.
	guestAgent := agentAt(net.JoinHostPort(guest, "9530"))
	// seedServed waits until the guest agent's Summary has the seed's pod
	// busy (its CPU where its processes really are).
	seedServed := func(timeout time.Duration, what string) podCPU {
		var got podCPU
		poll.Until(t, timeout, what, func() (bool, string, error) {
			code, body := guestAgent("/stats/summary?only_cpu_and_memory=true")
			if code != 200 {
				return false, fmt.Sprintf("%d %.200s", code, body), nil
			}
			got = summaryCPU(t, func(string) (int, string) { return code, body }, ns)["seed"]
			return got.pod > 0.3e9, fmt.Sprintf("%+v", got), nil
		})
		return got
	}
	got := seedServed(180*time.Second, "the guest agent's pod CPU for the seed")
	t.Logf("observed: the guest agent's Summary: pod %.0f, containers %.0f nanocores (the kubelet's pod figure was %.0f)", got.pod, got.containers, before.pod)
	if _, onHost := summaryCPU(t, agentAt(net.JoinHostPort(e.node, "9530")), ns)["seed"]; onHost {
		t.Errorf("the host node's agent lists the guest's pod")
	}
	// kubectl cgwarden over the fleet: each node's audit through its
	// agent (the API server's port-forward, through each node's kubelet),
	// the misplaced container found on the v2 node.
	out, stderr, err := e.plugin(t, buildPlugin(t), e.kubeconfig, "audit", "-A")
	all := out + stderr
	t.Logf("kubectl cgwarden audit -A:\n%s", all)
	misplaced := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(guest) + ` +error +misplaced-container +container main of pod ` + ns + `/seed `)
	if !strings.Contains(all, "2 of 2 nodes answered") || !misplaced.MatchString(all) {
		t.Errorf("kubectl cgwarden audit -A: %v: want both nodes answering and the seed's container misplaced on %s", err, guest)
	}
	// Each node named with its cgroups: this machine's v1 controllers
	// (beside an empty cgroup2) with the cgroupfs driver, the guest's v2
	// with systemd's.
	// The runtime is the Node's (the lane's agents do not read their
	// Node: no size policy), which the plugin reads as the user.
	for _, want := range []string{"node " + e.node + ": cgroup v1 (hybrid), cgroupfs driver, containerd://", "node " + guest + ": cgroup v2, systemd driver, containerd://2."} {
		if !strings.Contains(all, want) {
			t.Errorf("kubectl cgwarden audit -A: no %q", want)
		}
	}

	// Prometheus: both agents scraped, the fleet's cgroups in the
	// dashboard's table, both seeds' alerts firing for the guest.
	poll.Until(t, 60*time.Second, "Prometheus scraping both nodes' agents", func() (bool, string, error) {
		v, err := prom.query(`up{job="cgwarden"} == 1`)
		return len(v) == 2, fmt.Sprint(v), err
	})
	poll.Until(t, 60*time.Second, "a v1 (or hybrid) cgroupfs node and a v2 systemd node, through Prometheus", func() (bool, string, error) {
		v, err := prom.query(`cgwarden_node_cgroup_info`)
		seen := map[string]string{}
		for _, s := range v {
			seen[s.Metric["node"]] = s.Metric["cgroup_version"] + " " + s.Metric["cgroup_driver"]
		}
		// This machine's cgroups are v1 controllers beside an empty
		// cgroup2 (hybrid).
		host := seen[e.node] == "v1 cgroupfs" || seen[e.node] == "hybrid cgroupfs"
		return host && seen[guest] == "v2 systemd", fmt.Sprint(seen), err
	})
	seedAlert := map[string]string{"node": guest, "namespace": ns, "pod": "seed"}
	starved := map[string]string{"node": guest, "namespace": ns, "pod": "vm-1"}
	prom.waitFiring(t, map[string]map[string]string{"CgwardenMisplacedContainer": seedAlert, "CgwardenVMStarved": starved})
	sel := func(pod string) string { return fmt.Sprintf(`{node=%q, namespace=%q, pod=%q}`, guest, ns, pod) }
	share := "cgwarden_pod_cpu_guaranteed_cores" + sel("vm-1") + " / cgwarden_pod_cpu_declared_cores" + sel("vm-1")
	starvedShare := promValue(t, prom, share)

	// kubectl top: a metrics-server reading the agents (--kubelet-port
	// 9530, the guest's at 127.0.0.2) serves the misplaced pod at the
	// kubelet-backed one's figure, and the aggregation layer serves it.
	ours, theirs := directMetrics(t, e, cgwardenMetricsPort), directMetrics(t, e, 4443)
	// Each server rates its own scrapes' windows of a burner that shares
	// the emulated guest's CPUs: they agree within a factor of 2, as
	// TestPodMetricsConsumers has it (the guest read 343m and 461m in one
	// CI run, 367m and 590m in another; 0.76-1.01 of each other in the
	// runs before those), which a server reading the empty pod cgroup
	// (0) could not.
	var sample cpuSample
	poll.Until(t, 120*time.Second, "the seed's CPU from both metrics-servers, a busy loop's and within a factor of 2 of each other", func() (bool, string, error) {
		a, errA := metricsPodCPU(ours, ns, "seed")
		b, errB := metricsPodCPU(theirs, ns, "seed")
		sample = cpuSample{kubelet: b, cgwarden: a}
		return errA == nil && errB == nil && a > 300 && b > 300 && near(float64(a), float64(b)),
			fmt.Sprintf("cgwarden-backed %dm (%v), kubelet-backed %dm (%v)", a, errA, b, errB), nil
	})
	switchAPIService(t, e, cgwardenMetricsPort)
	top := topPod(t, e, ns, "seed")
	t.Logf("observed: metrics-servers: cgwarden-backed %dm, kubelet-backed %dm; kubectl top pod (cgwarden-backed): %s", sample.cgwarden, sample.kubelet, top)

	// Prevention: `cgwarden nri` beside the agent places a new pod on the
	// same runtime inside its pod's slice, as cri-containerd-<id>.scope
	// (the plugin gives the runtime the kubelet's own path); no literal
	// directory is made at the root, and the kubelet's own pod CPU is the
	// container's.
	p, err := e.cs.CoreV1().Pods(ns).Create(ctx, seedPod(ns, "placed", guest), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	placedID := containerID(e.runningPods(t, ns, "placed", 1, 240*time.Second)["placed"])
	placedUID := strings.ReplaceAll(string(p.UID), "-", "_")
	var cgs []string
	poll.Until(t, 60*time.Second, "the placed pod's loop running", func() (bool, string, error) {
		cgs = sh.processCgroups(t, "placed")
		return len(cgs) > 0, "no process", nil
	})
	for _, cg := range cgs {
		if !inPodSlice([]string{cg}, placedUID) || !strings.HasSuffix(cg, "/cri-containerd-"+placedID+".scope") {
			t.Errorf("with the plugin: the placed container's process is in %s, want its pod's slice, as cri-containerd-%s.scope", cg, placedID)
		}
	}
	if lit := strings.TrimSpace(sh.run(t, "ls /host/cgroup | grep -F 'pod"+placedUID+".slice:' || true")); lit != "" {
		t.Errorf("with the plugin the runtime still made a literal cgroup at the root: %s", lit)
	}
	cpu := e.guestPodCPU(t, guest, ns, "placed")
	t.Logf("with the plugin: cgroups %q; the guest kubelet's Summary: pod %.0f, containers %.0f nanocores", cgs, cpu.pod, cpu.containers)
	// The placed pod's loop goes: the fix phase weighs the seeds' pods
	// without it.
	if err := e.cs.CoreV1().Pods(ns).Delete(ctx, "placed", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}

	// Fix mode: adoption and weights by size.
	if out, err := runKubectl(e, "apply", "-k", "testdata/agent-prom-fix"); err != nil {
		t.Fatalf("kubectl apply -k testdata/agent-prom-fix: %v\n%s", err, out)
	}
	e.agentsFixing(t, 2)
	// Resolved because the agents' figures changed, not because a series
	// went stale while the DaemonSet replaced its pods.
	prom.waitResolved(t, "CgwardenMisplacedContainer", seedAlert, "cgwarden_pod_misplaced"+sel("seed"), " == 0")
	// Seed 000 on this node: the fix raises the VM's guarantee within its
	// tier and its pod, measured through Prometheus, but CgwardenVMStarved
	// stays: on a 2-CPU systemd node kubepods.slice's weight (79, the
	// kubelet's, from the allocatable CPU) is outweighed at the root by
	// systemd's slices and units at 100 each, so all the pods together
	// are guaranteed 0.2 cores (the audit's evidence) and no 1-CPU VM
	// half its size. cgwarden does not change the node's own slices
	// (docs/alerts.md, CgwardenVMStarved). On the host node the alert
	// resolves (TestPrometheusAlertsOnTheSeeds).
	var fixedShare float64
	poll.Until(t, 3*time.Minute, fmt.Sprintf("vm-1's guarantee of its size at least 3 times the %.4f it had", starvedShare), func() (bool, string, error) {
		fixedShare = promValue(t, prom, share)
		return fixedShare >= 3*starvedShare, fmt.Sprintf("%.4f", fixedShare), nil
	})
	t.Logf("seed 000 on the v2 node: vm-1 guaranteed %.4f of its size observed, %.4f fixed", starvedShare, fixedShare)

	var after []string
	poll.Until(t, 180*time.Second, "the seed's processes moved into their pod's slice", func() (bool, string, error) {
		after = sh.processCgroups(t, "seed")
		return inPodSlice(after, uid), fmt.Sprintf("%q", after), nil
	})
	for _, cg := range after {
		if !strings.HasSuffix(cg, "/cri-containerd-"+id+".scope") {
			t.Errorf("after: %s is not the container's scope cri-containerd-%s.scope", cg, id)
		}
	}
	cpu = e.guestPodCPU(t, guest, ns, "seed")
	kubelet := e.kubeletAt(t, guest)
	t.Logf("after: cgroups %q; the guest kubelet's Summary: pod %.0f nanocores (before %.0f)", after, cpu.pod, before.pod)

	// systemd keeps the scope it started through three daemon-reloads:
	// the processes stay in it and the kubelet's figure stays the
	// container's.
	sh.run(t, "for i in 1 2 3; do nsenter -t 1 -m -u -i -n -p -- systemctl daemon-reload; done")
	reloaded := time.Now()
	poll.Until(t, 120*time.Second, "the guest kubelet's pod CPU for the seed after 3 daemon-reloads", func() (bool, string, error) {
		if again := sh.processCgroups(t, "seed"); !reflect.DeepEqual(again, after) {
			return false, "", fmt.Errorf("after 3 daemon-reloads the seed's processes are in %q, want %q", again, after)
		}
		cpu = summaryCPU(t, kubelet, ns)["seed"]
		return cpu.pod > 0.3e9 && time.Since(reloaded) > 20*time.Second, fmt.Sprintf("%+v", cpu), nil
	})
	t.Logf("after 3 daemon-reloads: cgroups %q; the guest kubelet's pod CPU %.0f nanocores", after, cpu.pod)

	// The runtime's emptied cgroup goes (the fix overlay's one
	// capability, DAC_OVERRIDE: it sits at the hierarchy's root, 0555),
	// so a restart of containerd keeps the container: TestV2NodeFaultSuite
	// restarts it with this in its invariants.
	leftover := "/host/cgroup/kubepods-besteffort-pod" + uid + ".slice:cri-containerd:" + id
	poll.Until(t, 30*time.Second, "the runtime's emptied cgroup removed", func() (bool, string, error) {
		out := strings.TrimSpace(sh.run(t, "test -e "+leftover+" && echo there || echo gone"))
		return out == "gone", leftover + ": " + out, nil
	})
	// The agent serves the pod at its place.
	seedServed(60*time.Second, "the guest agent serving the seed after the repair")
	e.agentsFixing(t, 2)
}

// TestV2NodeSeed000Held: seed 000 on the systemd cgroup v2 node, as the
// in-process TestSystemdKubeletSeed000 has it against a standalone
// kubelet, here through the agent installed from the lane's manifests.
// Two BestEffort "VM" pods sized 1 and 4 CPUs (cgwarden.io/cpu, which the
// lane's fix overlay trusts) burn beside a Burstable hog, all pinned to
// the guest's second CPU. The kubelet weighs both VM pods 1 (cpu.weight),
// so they split what the hog leaves them evenly: the seed's symptom.
// With the fix-mode agent, their pod slices and their tier get weights
// set as systemd's CPUWeight property (the bus the fix mode mounts), the
// split becomes 4 ± 20%, and the weights stay through a daemon-reload
// (which resets a weight written to the file behind systemd's back:
// docs/systemd.md) and through the kubelet's reset of the tier when it
// makes a new pod's slice.
func TestV2NodeSeed000Held(t *testing.T) {
	e := cluster(t)
	guest := e.guestNode(t)
	importAgentEverywhere(t)
	ns := e.namespace(t)
	sh := e.guestShell(t, ns, guest)
	one := int64(1)
	const tierDir = "kubepods.slice/kubepods-besteffort.slice"
	units := map[string]string{"tier": "kubepods-besteffort.slice"} // name → unit
	dirs := map[string]string{"tier": tierDir}                      // name → cgroup
	for _, p := range []struct{ name, size, request string }{{"vm-1", "1000m", ""}, {"vm-4", "4000m", ""}, {"hog", "", "100m"}} {
		pod := onGuest(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{"app": p.name}},
			Spec: corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: &one, Containers: []corev1.Container{{
				Name: "vm", Image: busybox, ImagePullPolicy: corev1.PullNever,
				// The loop starts stopped (not as the container's PID 1,
				// which ignores SIGSTOP from inside its namespace): with
				// a CPU of the emulated guest burnt, its kubelet takes
				// minutes to start a pod, so the loops run only while
				// the split is measured.
				Command: []string{"sh", "-c", "taskset -c 1 sh -c ': " + p.name + "-loop; kill -STOP $$; while :; do :; done' & wait"}}}},
		}, guest)
		if p.size != "" {
			pod.Annotations = map[string]string{"cgwarden.io/cpu": p.size}
		}
		qos := "besteffort"
		if p.request != "" {
			qos = "burstable"
			pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(p.request)}
		}
		created, err := e.cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		unit := "kubepods-" + qos + "-pod" + strings.ReplaceAll(string(created.UID), "-", "_") + ".slice"
		dirs[p.name] = "kubepods.slice/kubepods-" + qos + ".slice/" + unit
		if p.size != "" {
			units[p.name] = unit
		}
	}
	for _, name := range []string{"vm-1", "vm-4", "hog"} {
		e.runningPods(t, ns, name, 1, 240*time.Second)
	}
	loops := func(sig string) {
		sh.run(t, `for p in /proc/[0-9]*; do c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); case "$c" in *'vm-1''-loop'*|*'vm-4''-loop'*|*'hog''-loop'*) kill -`+sig+` ${p#/proc/};; esac; done`)
	}
	t.Cleanup(func() { loops("CONT") })
	weights := func() map[string][2]string { return sh.weights(t, units, dirs) }
	// The split: each pod's CPU over 12 s of the guest's own clock, the
	// ratio of the 4-CPU VM's to the 1-CPU VM's. One grep reads the three
	// cpu.stat files at once (a process takes a second to start in a
	// busy TCG guest), after the guest's uptime, which gives the window.
	split := func(when string) float64 {
		loops("CONT")
		defer loops("STOP")
		script := "sleep 2; read0() { cut -d' ' -f1 /proc/uptime; grep -h usage_usec"
		for _, name := range []string{"vm-1", "vm-4", "hog"} {
			script += " /host/cgroup/" + dirs[name] + "/cpu.stat"
		}
		script += "; }; read0; sleep 12; read0"
		var u []float64
		for _, l := range strings.Split(strings.TrimSpace(sh.run(t, script)), "\n") {
			// The uptime alone on its line, or usage_usec N.
			f := strings.Fields(l)
			if len(f) == 2 && f[0] == "usage_usec" {
				f = f[1:]
			}
			if len(f) != 1 {
				continue
			}
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				u = append(u, v)
			}
		}
		if len(u) != 8 || u[4] <= u[0] {
			t.Fatalf("%s: the guest's uptime and the pods' cpu.stat: %v", when, u)
		}
		cores := func(i int) float64 { return (u[5+i] - u[1+i]) / ((u[4] - u[0]) * 1e6) }
		ratio := cores(1) / cores(0)
		t.Logf("SEED000 on the v2 node: %s: vm-1 %.3f cores, vm-4 %.3f, hog %.3f: split %.2f (cpu.weight, CPUWeight: %v)", when, cores(0), cores(1), cores(2), ratio, weights())
		return ratio
	}
	before := weights()
	if before["vm-1"][0] != "1" || before["vm-4"][0] != "1" {
		t.Fatalf("before: cpu.weight %v, want the kubelet's 1 for each BestEffort pod (seed 000)", before)
	}
	if r := split("the kubelet's weights"); r > 2 {
		t.Errorf("before the agent the 4-CPU pod got %.2f× the 1-CPU pod's CPU: the kubelet cannot see their sizes, so both weigh the same", r)
	}

	e.installAgent(t, "testdata/agent-fix")
	var held map[string][2]string
	poll.Until(t, 180*time.Second, "the VMs' weights held in proportion to their sizes, as systemd properties", func() (bool, string, error) {
		held = weights()
		w1, _ := strconv.Atoi(held["vm-1"][0])
		w4, _ := strconv.Atoi(held["vm-4"][0])
		ok := w1 > 1 && w4 >= 3*w1
		for _, w := range held {
			ok = ok && w[0] == w[1]
		}
		return ok, fmt.Sprintf("%v (file, property)", held), nil
	})
	if held["tier"][0] == "1" {
		t.Fatalf("held: %v: the agent did not raise the BestEffort tier (besteffort-starvation), so the kubelet's reset of it cannot be told apart", held)
	}
	sh.run(t, "nsenter -t 1 -m -u -i -n -p -- systemctl daemon-reload")
	time.Sleep(5 * time.Second)
	if after := weights(); !reflect.DeepEqual(after, held) {
		t.Errorf("after daemon-reload: %v, want the held %v", after, held)
	}

	// The kubelet's QoS reset: it sets the tier's weight (through systemd)
	// whenever it makes a pod's slice. A watch on the guest reads the
	// tier's file every 20 ms from before a new BestEffort pod is created
	// until it has seen the reset and the held weight back (or 150 s).
	watch := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "exec", "-n", ns, sh.pod, "--", "timeout", "150", "sh", "-c",
		`f=/host/cgroup/`+tierDir+`/cpu.weight; h=`+held["tier"][0]+`; p=; off=; echo watching; while :; do read -r v < $f; if [ "$v" != "$p" ]; then echo "$(date +%s) $v"; p=$v; [ "$v" != "$h" ] && off=1; [ -n "$off" ] && [ "$v" = "$h" ] && exit 0; fi; sleep 0.02; done`)
	var watched strings.Builder
	out, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	watch.Stderr = &watched
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "watching" {
		t.Fatalf("the tier's watch on the guest did not start: %q %s", lines.Text(), watched.String())
	}
	nudged := time.Now()
	if _, err := e.cs.CoreV1().Pods(ns).Create(context.Background(), onGuest(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "nudge", Labels: map[string]string{"app": "nudge"}},
		Spec: corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: &one, Containers: []corev1.Container{{
			Name: "sleep", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "86400"}}}},
	}, guest), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for lines.Scan() {
		seen = append(seen, lines.Text())
	}
	watchErr := watch.Wait()
	t.Logf("the tier's cpu.weight after a new pod (unix seconds, value; held %s): %q, %v after the pod's creation", held["tier"][0], seen, time.Since(nudged).Round(time.Second))
	if watchErr != nil || len(seen) < 2 {
		t.Errorf("the tier's weight was not reset by the kubelet and held again within 150 s of a new pod (%v; %s): %q", watchErr, watched.String(), seen)
	} else {
		// From the first value off the held one to the held one back.
		var off, back int
		for _, l := range seen {
			f := strings.Fields(l)
			if len(f) != 2 {
				continue
			}
			at, _ := strconv.Atoi(f[0])
			if f[1] != held["tier"][0] && off == 0 {
				off = at
			}
			back = at
		}
		if back-off > 5 {
			t.Errorf("the kubelet's reset of the tier stayed %d s before the agent restored it (bound 5 s): %q", back-off, seen)
		}
	}
	e.runningPods(t, ns, "nudge", 1, 240*time.Second)
	// The kubelet sets the tier again as the pod starts. systemd takes
	// the property at once and writes the file a moment later, so one
	// reading between the two gave the file held and the property reset
	// ([79 1]); the file's change then brings the holder back. How long a
	// reset lasts is bounded above (5 s); here both must come back.
	poll.Until(t, 30*time.Second, "the weights held after the kubelet's reset", func() (bool, string, error) {
		after := weights()
		return reflect.DeepEqual(after, held), fmt.Sprintf("%v, want the held %v", after, held), nil
	})
	// A restart of the guest's kubelet (which sets its tiers again as it
	// starts): the weights are held again.
	sh.restart(t, "kubelet")
	poll.Until(t, 120*time.Second, "the weights held after the kubelet's restart", func() (bool, string, error) {
		after := weights()
		return reflect.DeepEqual(after, held), fmt.Sprintf("%v, want %v", after, held), nil
	})
	// ±20%: CI's busy TCG guest once gave 4.62 where runs on a quieter
	// host give 3.93-4.01; the kubelet's own weights give 1.
	if r := split("held by the agent through a daemon-reload, the kubelet's reset and its restart"); r < 3.2 || r > 4.8 {
		t.Errorf("the held split is %.2f, want 4 ± 20%%", r)
	}
	t.Logf("cpu.weight (file, CPUWeight property): before %v, held %v, kept through a daemon-reload, the kubelet's reset and its restart", before, held)
}

// TestV2NodeSizerResizesInPlace: the sizer installed from its manifests
// (TestSizerDeployedWithItsManifests' install: it runs on the host's
// node) sizes a NeonVM runner pod on the systemd cgroup v2 node at
// admission and resizes it in place when its VM grows (1 → 1200m); the guest's
// kubelet (systemd driver) carries the new request to the pod slice's
// cpu.weight (as systemd's CPUWeight), and a CPUResized Event says so.
func TestV2NodeSizerResizesInPlace(t *testing.T) {
	e := cluster(t)
	guest := e.guestNode(t)
	importAgentEverywhere(t)
	ensureCRD(t, dynamicClient(t, e))
	sys := e.namespace(t)
	ns := e.namespace(t)
	e.installSizer(t, sys, ns)
	sh := e.guestShell(t, ns, guest)
	// To 1200m, within 60 s: the guest's two CPUs hold its own pods'
	// requests too (550m when this was written: the kubelet deferred a
	// resize to 1500m, "Node didn't have enough resource"), and it is
	// emulated, its kubelet slower to act.
	e.sizeAndResizeVMOn(t, ns, "1200m", 60*time.Second, func(p *corev1.Pod) *corev1.Pod { return onGuest(p, guest) }, func(uid types.UID, milli int64) (func() int64, int64) {
		unit := "kubepods-burstable-pod" + strings.ReplaceAll(string(uid), "-", "_") + ".slice"
		shares := max(milli*1024/1000, 2)
		return func() int64 {
			out := strings.Fields(sh.run(t, "cat /host/cgroup/kubepods.slice/kubepods-burstable.slice/"+unit+"/cpu.weight; nsenter -t 1 -m -u -i -n -p -- systemctl show -p CPUWeight --value "+unit))
			if len(out) != 2 || out[0] != out[1] {
				t.Logf("%s: cpu.weight and CPUWeight %q", unit, out)
				return -1
			}
			w, _ := strconv.ParseInt(out[0], 10, 64)
			return w
		}, 1 + ((shares-2)*9999)/262142
	})
}
