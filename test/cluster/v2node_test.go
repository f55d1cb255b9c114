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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The lane's second node: the systemd guest (scripts/vmtest --node with
// VMTEST_JOIN), systemd as PID 1 on pure cgroup v2, containerd 2.4.2 with
// SystemdCgroup, the kubelet with the systemd driver. It registers as
// lab.GuestNode (127.0.0.2), labelled and tainted guestNodeLabel=
// v2-systemd; QEMU forwards the host's 127.0.0.2:10250 (its kubelet) and
// :7000 (an image import socket) to it. Its agent is reached through the
// API server's port-forward (the host node's agent holds every address's
// 9530). The tests named
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
	poll(t, 240*time.Second, "the guest shell running", func() (bool, string, error) {
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
	out, err := runKubectl(g.e, "exec", "-n", g.ns, g.pod, "--", "sh", "-c", script)
	if err != nil {
		t.Fatalf("on the guest: %s: %v\n%s", script, err, out)
	}
	return out
}

// processCgroups are the cgroups (v2: the one line of /proc/<pid>/cgroup)
// of the guest's processes whose command line holds marker + "-loop"
// (split so that the probe's own command line does not).
func (g *guestShell) processCgroups(t *testing.T, marker string) []string {
	t.Helper()
	out := g.run(t, `for p in /proc/[0-9]*; do c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); case "$c" in *'`+marker+`''-loop'*) echo "${p#/proc/} $(cat $p/cgroup)";; esac; done`)
	var cgs []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && strings.HasPrefix(f[1], "0::") {
			cgs = append(cgs, strings.TrimPrefix(f[1], "0::"))
		}
	}
	return cgs
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
	poll(t, 60*time.Second, "the seed's loop running", func() (bool, string, error) {
		cgs = sh.processCgroups(t, "seed")
		return len(cgs) > 0, "no process", nil
	})
	if inPodSlice(cgs, uid) {
		t.Fatalf("before: the seed's processes are in their pod's slice already (%q): the misplace runtime did not misplace them", cgs)
	}
	kubelet := e.kubeletAt(t, guest)
	poll(t, 90*time.Second, "the guest kubelet's figures for the seed", func() (bool, string, error) {
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

// TestV2NodeServesMisplacedPod: the observe-only agent installed from the
// lane's manifests runs Ready on both nodes, and on the systemd cgroup v2
// node, where seed 003's container runs outside its pod's slice and the
// kubelet's pod CPU misses it, the agent's Summary (what metrics-server
// reads in its place) has the pod's CPU where its processes really are;
// the host node's agent does not list the guest's pod.
func TestV2NodeServesMisplacedPod(t *testing.T) {
	e := cluster(t)
	guest := e.guestNode(t)
	importAgentEverywhere(t)
	ns := e.namespace(t)
	sh := e.guestShell(t, ns, guest)
	_, before := e.seedOnGuest(t, ns, guest, sh)
	e.installAgent(t, "testdata/agent")
	tok := e.nodeReaderToken(t, ns, "reader", "nodes/metrics", "nodes/stats")
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	agentAt := func(hostport string) func(string) (int, string) {
		return func(path string) (int, string) { return agentGetAt(client, hostport, path, tok) }
	}
	guestAgent := agentAt(e.portForward(t, "cgwarden-system", e.agentOn(t, guest), 9530))
	var got podCPU
	poll(t, 180*time.Second, "the guest agent's pod CPU for the seed", func() (bool, string, error) {
		code, body := guestAgent("/stats/summary?only_cpu_and_memory=true")
		if code != 200 {
			return false, fmt.Sprintf("%d %.200s", code, body), nil
		}
		got = summaryCPU(t, func(string) (int, string) { return code, body }, ns)["seed"]
		return got.pod > 0.3e9, fmt.Sprintf("%+v", got), nil
	})
	t.Logf("after: the guest agent's Summary: pod %.0f, containers %.0f nanocores (the kubelet's pod figure was %.0f)", got.pod, got.containers, before.pod)
	if _, onHost := summaryCPU(t, agentAt("127.0.0.1:9530"), ns)["seed"]; onHost {
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
}

// agentOn is the name of the agent's pod on node.
func (e *env) agentOn(t *testing.T, node string) string {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods("cgwarden-system").List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=cgwarden", FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d agent pods on %s", len(pods.Items), node)
	}
	return pods.Items[0].Name
}

// portForward forwards a free port of the host's loopback to port of the
// pod (kubectl port-forward: the API server's pods/portforward, through
// the pod's node's kubelet) until the test ends, and returns its
// host:port.
func (e *env) portForward(t *testing.T, ns, pod string, port int) string {
	t.Helper()
	cmd := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "port-forward", "-n", ns, "pod/"+pod, "--address", "127.0.0.1", fmt.Sprintf(":%d", port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// "Forwarding from 127.0.0.1:41234 -> 9530"
	lines := bufio.NewScanner(out)
	first := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) ->`)
	found := make(chan string, 1)
	go func() {
		for lines.Scan() {
			if m := first.FindStringSubmatch(lines.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case hp := <-found:
		return hp
	case <-time.After(60 * time.Second):
		t.Fatalf("kubectl port-forward to %s/%s:%d said nothing in 60 s", ns, pod, port)
		return ""
	}
}

// TestV2NodeSeed003Repaired: seed 003 on the systemd cgroup v2 node,
// repaired there by the fix-mode agent installed from the lane's
// manifests (--fix=misplaced-container). Its cgroup namespace is its own
// (containerd's on v2) and systemd mounts cgroup2 with nsdelegate, so a
// write to cgroup.procs is refused (ENOENT: the first run of this test,
// docs/systemd.md); systemd, reached through the bus the fix mode mounts,
// starts the container's scope in its pod's slice with its processes.
// After: the loop's processes in cri-containerd-<id>.scope beneath the
// pod's slice, and the guest kubelet's own pod CPU follows them.
func TestV2NodeSeed003Repaired(t *testing.T) {
	e := cluster(t)
	guest := e.guestNode(t)
	importAgentEverywhere(t)
	ns := e.namespace(t)
	sh := e.guestShell(t, ns, guest)
	uid, before := e.seedOnGuest(t, ns, guest, sh)
	pods := e.runningPods(t, ns, "seed", 1, 10*time.Second)
	id := containerID(pods["seed"])
	e.installAgent(t, "testdata/agent-adopt")
	var after []string
	poll(t, 180*time.Second, "the seed's processes moved into their pod's slice", func() (bool, string, error) {
		after = sh.processCgroups(t, "seed")
		return inPodSlice(after, uid), fmt.Sprintf("%q", after), nil
	})
	for _, cg := range after {
		if !strings.HasSuffix(cg, "/cri-containerd-"+id+".scope") {
			t.Errorf("after: %s is not the container's scope cri-containerd-%s.scope", cg, id)
		}
	}
	kubelet := e.kubeletAt(t, guest)
	var cpu podCPU
	poll(t, 120*time.Second, "the guest kubelet's pod CPU for the seed", func() (bool, string, error) {
		cpu = summaryCPU(t, kubelet, ns)["seed"]
		return cpu.pod > 0.3e9, fmt.Sprintf("%+v", cpu), nil
	})
	t.Logf("after: cgroups %q; the guest kubelet's Summary: pod %.0f nanocores (before %.0f)", after, cpu.pod, before.pod)
}

// TestV2NodeSeed000Held: seed 000 on the systemd cgroup v2 node. Two
// BestEffort "VM" pods sized 1 and 4 CPUs (cgwarden.io/cpu, which the
// lane's fix overlay trusts) start at the kubelet's weight for BestEffort
// (cpu.weight 1 each: the seed's starvation). With the fix-mode agent
// installed from the lane's manifests, their pod slices get weights in
// the sizes' proportion, held as systemd's CPUWeight property (the bus
// the fix mode mounts), and they stay after a daemon-reload, which resets
// a weight written to the file behind systemd's back (docs/systemd.md).
func TestV2NodeSeed000Held(t *testing.T) {
	e := cluster(t)
	guest := e.guestNode(t)
	importAgentEverywhere(t)
	ns := e.namespace(t)
	sh := e.guestShell(t, ns, guest)
	one := int64(1)
	units := map[string]string{}
	for name, size := range map[string]string{"vm-1": "1000m", "vm-4": "4000m"} {
		p, err := e.cs.CoreV1().Pods(ns).Create(context.Background(), onGuest(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}, Annotations: map[string]string{"cgwarden.io/cpu": size}},
			Spec: corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: &one, Containers: []corev1.Container{{
				Name: "vm", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "86400"}}}},
		}, guest), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		units[name] = "kubepods-besteffort-pod" + strings.ReplaceAll(string(p.UID), "-", "_") + ".slice"
	}
	for name := range units {
		e.runningPods(t, ns, name, 1, 240*time.Second)
	}
	// The weight in the slice's file and systemd's property of the unit,
	// read on the guest (systemctl in PID 1's namespaces).
	weights := func() map[string][2]string {
		out := map[string][2]string{}
		for name, unit := range units {
			file := strings.TrimSpace(sh.run(t, "cat /host/cgroup/kubepods.slice/kubepods-besteffort.slice/"+unit+"/cpu.weight"))
			prop := strings.TrimSpace(sh.run(t, "nsenter -t 1 -m -u -i -n -p -- systemctl show -p CPUWeight --value "+unit))
			out[name] = [2]string{file, prop}
		}
		return out
	}
	before := weights()
	if before["vm-1"][0] != "1" || before["vm-4"][0] != "1" {
		t.Fatalf("before: cpu.weight %v, want the kubelet's 1 for each BestEffort pod (seed 000)", before)
	}
	e.installAgent(t, "testdata/agent-fix")
	var held map[string][2]string
	poll(t, 180*time.Second, "the VMs' weights held in proportion to their sizes, as systemd properties", func() (bool, string, error) {
		held = weights()
		w1, _ := strconv.Atoi(held["vm-1"][0])
		w4, _ := strconv.Atoi(held["vm-4"][0])
		ok := w1 > 1 && w4 >= 3*w1 && held["vm-1"][0] == held["vm-1"][1] && held["vm-4"][0] == held["vm-4"][1]
		return ok, fmt.Sprintf("%v (file, property)", held), nil
	})
	sh.run(t, "nsenter -t 1 -m -u -i -n -p -- systemctl daemon-reload")
	time.Sleep(5 * time.Second)
	if after := weights(); !reflect.DeepEqual(after, held) {
		t.Errorf("after daemon-reload: %v, want the held %v", after, held)
	}
	t.Logf("cpu.weight (file, CPUWeight property): before %v, held %v, kept through daemon-reload", before, held)
}
