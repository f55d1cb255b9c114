package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/yaml"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// capBits are the capabilities a manifest may name, by their bit in
// /proc/<pid>/status (linux/capability.h).
var capBits = map[string]uint{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "KILL": 5, "SETGID": 6, "SETUID": 7,
	"NET_BIND_SERVICE": 10, "NET_ADMIN": 12, "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_ADMIN": 21, "SYS_RESOURCE": 24,
	"WAKE_ALARM": 35,
}

// namedCaps is the CapEff a container's securityContext asks for: the
// bits of capabilities.add (drop: [ALL] is checked by deploy/test).
func namedCaps(t *testing.T, c *corev1.Container) uint64 {
	t.Helper()
	var m uint64
	if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
		return 0
	}
	for _, a := range c.SecurityContext.Capabilities.Add {
		b, ok := capBits[strings.TrimPrefix(string(a), "CAP_")]
		if !ok {
			t.Fatalf("container %s adds capability %s: not in capBits", c.Name, a)
		}
		m |= 1 << b
	}
	return m
}

// containerPID is the host PID of a process of the pod's container name,
// from its cgroup under the kubelet's tree (cgroupfs driver).
func containerPID(t *testing.T, p *corev1.Pod, name string) int {
	t.Helper()
	root, _ := cgroupRoot()
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != name {
			continue
		}
		id := strings.TrimPrefix(cs.ContainerID, "containerd://")
		dir := filepath.Join(root, "kubepods", strings.ToLower(string(p.Status.QOSClass)), "pod"+string(p.UID), id)
		if p.Status.QOSClass == corev1.PodQOSGuaranteed {
			dir = filepath.Join(root, "kubepods", "pod"+string(p.UID), id)
		}
		ps := procs(dir)
		if len(ps) == 0 {
			t.Fatalf("container %s of %s: no process in %s", name, p.Name, dir)
		}
		pid, err := strconv.Atoi(ps[0])
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	t.Fatalf("pod %s has no container %s in its status", p.Name, name)
	return 0
}

// status reads fields of /proc/<pid>/status.
func status(t *testing.T, pid int, fields ...string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		for _, f := range fields {
			if k == f {
				out[k] = strings.TrimSpace(v)
			}
		}
	}
	return out
}

// capEff is the effective capability set of host process pid.
func capEff(t *testing.T, pid int) uint64 {
	t.Helper()
	s := status(t, pid, "CapEff")["CapEff"]
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		t.Fatalf("CapEff %q of %d: %v", s, pid, err)
	}
	return v
}

// agentPod is the one agent pod.
func (e *env) agentPod(t *testing.T) (*corev1.Pod, *corev1.PodSpec) {
	t.Helper()
	ctx := context.Background()
	pods, err := e.cs.CoreV1().Pods("cgwarden-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cgwarden"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("agent pods: %v (%d)", err, len(pods.Items))
	}
	ds, err := e.cs.AppsV1().DaemonSets("cgwarden-system").Get(ctx, "cgwarden", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &pods.Items[0], &ds.Spec.Template.Spec
}

// staysReady watches the pods of selector in ns for d: every container
// Ready the whole time, none restarted. It returns what went wrong.
func (e *env) staysReady(ns, selector string, d time.Duration) error {
	ctx := context.Background()
	restarts := map[string]int32{}
	deadline := time.Now().Add(d)
	for {
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return errors.New("no pod")
		}
		for _, p := range pods.Items {
			if len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
				return fmt.Errorf("pod %s: %d container statuses for %d containers", p.Name, len(p.Status.ContainerStatuses), len(p.Spec.Containers))
			}
			for _, c := range p.Status.ContainerStatuses {
				key := p.Name + "/" + c.Name
				if was, ok := restarts[key]; ok && c.RestartCount != was {
					return fmt.Errorf("container %s restarted (%d -> %d): %s", key, was, c.RestartCount, describe(&p))
				}
				restarts[key] = c.RestartCount
				if !c.Ready {
					return fmt.Errorf("container %s not Ready: %s", key, describe(&p))
				}
			}
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(2 * time.Second)
	}
}

// keepsReady runs staysReady for 60 s beside the rest of the test, and
// fails the test at its end (before an uninstall registered earlier) if a
// container of the pods of selector in ns restarted or was not Ready:
// issue #21's bar for every configuration, "every container Ready and
// stays Ready for 60 s". Call it once the install is Ready.
func (e *env) keepsReady(t *testing.T, what, ns, selector string) {
	t.Helper()
	ready := make(chan error, 1)
	start := time.Now()
	go func() { ready <- e.staysReady(ns, selector, 60*time.Second) }()
	t.Cleanup(func() {
		if err := <-ready; err != nil {
			t.Errorf("%s did not stay Ready for 60 s: %v", what, err)
			return
		}
		t.Logf("%s: every container Ready, none restarted, for %v", what, time.Since(start).Round(time.Second))
	})
}

// TestObserveOnlyAgentPrivileges: deploy/kustomize/nri in the lane (the
// observe-only agent of the base, and `cgwarden nri` beside it). Both
// containers become Ready and stay Ready, without a restart, for 60 s
// (before the ports were split the nri container exited on every node:
// its --listen was the agent's --local-listen). Meanwhile, the agent's
// own processes, read from the host: CapEff what the manifest names (none),
// a non-root uid; through the agent's mount namespace (/proc/<pid>/root) a
// write to a cgroup file, and a mkdir in a hierarchy, fail with EROFS (the
// cgroup tree is recursively read-only: on this v1 node every hierarchy is
// a mount of its own); no containerd socket or journal in it; and a pod
// with the agent's exact securityContext, volumes and mounts (busybox in
// place of cgwarden, whose image has no shell) cannot open /proc/1/root of
// the host, while it reads what the agent reads.
func TestObserveOnlyAgentPrivileges(t *testing.T) {
	e := cluster(t)
	if s := os.Getenv("CGWARDEN_CLUSTER_NRI"); s != "/var/lib/cgwarden-cluster/nri/nri.sock" {
		t.Fatalf("CGWARDEN_CLUSTER_NRI %q: testdata/agent-nri mounts /var/lib/cgwarden-cluster/nri", s)
	}
	importAgentImage(t)
	e.installAgent(t, "testdata/agent-nri")
	ready := make(chan error, 1)
	go func() { ready <- e.staysReady("cgwarden-system", "app.kubernetes.io/name=cgwarden", 60*time.Second) }()

	pod, spec := e.agentPod(t)
	for _, c := range spec.Containers {
		pid := containerPID(t, pod, c.Name)
		st := status(t, pid, "CapEff", "CapPrm", "Uid")
		got, want := capEff(t, pid), namedCaps(t, &c)
		t.Logf("container %s (host pid %d): CapEff %s CapPrm %s Uid %s", c.Name, pid, st["CapEff"], st["CapPrm"], st["Uid"])
		if got != want {
			t.Errorf("container %s: CapEff %#x, the manifest names %#x", c.Name, got, want)
		}
		if c.Name == "cgwarden" {
			// The user the manifest names, and one of its own: not root,
			// not nobody (its SO_REUSEPORT listeners on the host's network
			// share their port with any socket of the same user).
			want := "0"
			if sc := c.SecurityContext; sc != nil && sc.RunAsUser != nil {
				want = strconv.FormatInt(*sc.RunAsUser, 10)
			}
			if uid := strings.Fields(st["Uid"]); len(uid) < 2 || uid[1] != want || want == "0" || want == "65534" {
				t.Errorf("the observe-only agent runs as uid %v (the manifest: %s), want a non-root user of its own", uid, want)
			}
		}
	}

	// A scratch cgroup of the test's own, in the cpu hierarchy.
	root, wf := cgroupRoot()
	scratch := filepath.Join(root, "cgwarden-privtest-"+rand.String(6))
	if err := os.Mkdir(scratch, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(scratch) })
	agent := containerPID(t, pod, "cgwarden")
	inAgent := func(p string) string { return fmt.Sprintf("/proc/%d/root/host%s", agent, p) }
	err := os.WriteFile(inAgent(filepath.Join(scratch, wf)), []byte("4"), 0)
	if !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing %s in the agent's mounts: %v, want EROFS", wf, err)
	}
	err = os.Mkdir(inAgent(filepath.Join(scratch, "child")), 0o755)
	if !errors.Is(err, syscall.EROFS) {
		t.Errorf("mkdir in the agent's cgroup mount: %v, want EROFS", err)
	}
	for _, p := range []string{"/run/containerd/containerd.sock", "/run/containerd"} {
		for _, where := range []string{inAgent(p), fmt.Sprintf("/proc/%d/root%s", agent, p)} {
			if _, err := os.Stat(where); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s in the agent's mounts: %v, want absent", where, err)
			}
		}
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/var/lib/cgwarden", agent)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the observe-only agent has a journal directory: %v", err)
	}

	out := probeAs(t, e, pod, spec, "cgwarden", scratch, wf)
	for _, want := range []string{
		"proc1root: denied", "hostproc1root: denied",
		"cgroup-of-1: ok", "schedstat-of-1: ok", "mountinfo-of-1: ok", "kubepods-shares: ok",
		"containerd: absent",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("probe with the agent's securityContext: no %q in:\n%s", want, out)
		}
	}
	// busybox sh words the refusal "sh: can't create PATH: Read-only file
	// system" (EROFS): the write line must end so, not "ok" nor EACCES.
	if !regexp.MustCompile(`(?m)^write: .*: Read-only file system$`).MatchString(out) {
		t.Errorf("probe with the agent's securityContext: the write was not refused with EROFS:\n%s", out)
	}
	logs, _ := runKubectl(e, "logs", "-n", "cgwarden-system", "ds/cgwarden", "-c", "cgwarden")
	if strings.Contains(strings.ToLower(logs), "permission denied") {
		t.Errorf("the agent was refused a read:\n%s", tail(logs, 20))
	}
	if err := <-ready; err != nil {
		t.Errorf("deploy/kustomize/nri: %v", err)
	}
}

// probeAs runs busybox in a pod made from the agent's pod spec: the same
// pod securityContext, host namespaces, volumes, and the securityContext
// and mounts of container name; it prints what it could do.
func probeAs(t *testing.T, e *env, agent *corev1.Pod, spec *corev1.PodSpec, name, scratch, wf string) string {
	t.Helper()
	script := `
ls /proc/1/root/ >/dev/null 2>&1 && echo "proc1root: open" || echo "proc1root: denied"
ls /host/proc/1/root/ >/dev/null 2>&1 && echo "hostproc1root: open" || echo "hostproc1root: denied"
err=$( (echo 4 > /host` + filepath.Join(scratch, wf) + `) 2>&1 ) && echo "write: ok" || echo "write: $err"
cat /host/proc/1/cgroup >/dev/null && echo "cgroup-of-1: ok"
cat /host/proc/1/task/1/schedstat >/dev/null && echo "schedstat-of-1: ok"
cat /host/proc/1/mountinfo >/dev/null && echo "mountinfo-of-1: ok"
cat /host/sys/fs/cgroup/cpu/kubepods/cpu.shares >/dev/null && echo "kubepods-shares: ok"
test -e /host/run/containerd && echo "containerd: present" || echo "containerd: absent"
grep -E '^(Uid|CapEff)' /proc/self/status
`
	return probeScript(t, e, agent, spec, name, script)
}

// probeScript runs script in busybox in a pod made as probeAs's and
// returns what it printed.
func probeScript(t *testing.T, e *env, agent *corev1.Pod, spec *corev1.PodSpec, name, script string) string {
	t.Helper()
	ctx := context.Background()
	var c corev1.Container
	for _, x := range spec.Containers {
		if x.Name == name {
			c = x
		}
	}
	grace := int64(0)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cgwarden-probe-" + rand.String(5), Namespace: "cgwarden-system"},
		Spec: corev1.PodSpec{
			NodeName: agent.Spec.NodeName, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &grace,
			HostPID: spec.HostPID, HostNetwork: spec.HostNetwork, SecurityContext: spec.SecurityContext,
			Volumes: spec.Volumes, Tolerations: spec.Tolerations, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{
				Name: "probe", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sh", "-c", script},
				SecurityContext: c.SecurityContext, VolumeMounts: c.VolumeMounts,
			}},
		},
	}
	// The image's root is read-only, as the agent's; busybox needs none.
	if _, err := e.cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
	})
	poll.Until(t, 60*time.Second, "the probe pod done", func() (bool, string, error) {
		got, err := e.cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return got.Status.Phase == corev1.PodSucceeded || got.Status.Phase == corev1.PodFailed, describe(got), nil
	})
	out, err := runKubectl(e, "logs", "-n", p.Namespace, p.Name)
	if err != nil {
		t.Fatalf("probe logs: %v\n%s", err, out)
	}
	t.Logf("probe with container %s's securityContext and mounts:\n%s", name, out)
	return out
}

// TestRBACIsLeast: the agent's and the sizer's roles as deploy/kustomize
// renders them, bound to ServiceAccounts of a test namespace, asked with
// `kubectl auth can-i --as`: the sizer may patch pods/resize and may not
// patch, update, create or delete pods (so it cannot change an image);
// neither reads Secrets outside what the sizer keeps for itself; the agent
// writes nothing but Events; the size policy's role lets it list and
// watch that policy and binding by name, and Nodes, and nothing else. The resize itself through these rules is

// TestFixAgentWritesOnlyItsHierarchies: the fixing agent of
// testdata/agent-adopt-v1 (deploy/kustomize/components/fix, then
// components/cgroup-v1) on this cgroup v1 node. Through its mount
// namespace (/proc/<pid>/root), in scratch cgroups of the test's own: the
// hierarchies adoption and weights write (cpu, cpuacct, memory, pids) take
// a mkdir, and cpu a cpu.shares write the host then reads; devices,
// freezer and blkio refuse a mkdir and a write with EROFS. Without the
// component every hierarchy is writable: devices.deny and freezer.state
// take the write. The host node's adoption tests run under the same
// overlay.
func TestFixAgentWritesOnlyItsHierarchies(t *testing.T) {
	e := cluster(t)
	if _, wf := cgroupRoot(); wf != "cpu.shares" {
		t.Fatalf("the lane's node is cgroup v1 (%s): components/cgroup-v1 is for v1 nodes", wf)
	}
	importAgentImage(t)
	e.installAgent(t, "testdata/agent-adopt-v1")
	pod, _ := e.agentPod(t)
	agent := containerPID(t, pod, "cgwarden")
	name := "cgwarden-privtest-" + rand.String(6)
	scratch := func(h string) string {
		dir := filepath.Join("/sys/fs/cgroup", h, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = os.Remove(filepath.Join(dir, "child"))
			_ = os.Remove(dir)
		})
		return dir
	}
	inAgent := func(p string) string { return fmt.Sprintf("/proc/%d/root/host%s", agent, p) }
	for _, h := range []string{"cpu", "cpuacct", "memory", "pids"} {
		dir := scratch(h)
		if err := os.Mkdir(inAgent(filepath.Join(dir, "child")), 0o755); err != nil {
			t.Errorf("%s: mkdir through the agent's mounts: %v, want it allowed (adoption writes here)", h, err)
		}
		if h == "cpu" {
			if err := os.WriteFile(inAgent(filepath.Join(dir, "cpu.shares")), []byte("4"), 0); err != nil {
				t.Errorf("cpu.shares through the agent's mounts: %v", err)
			} else if got := readInt(t, filepath.Join(dir, "cpu.shares")); got != 4 {
				t.Errorf("cpu.shares written 4 through the agent's mounts, the host reads %d", got)
			}
		}
	}
	for h, file := range map[string][2]string{"devices": {"devices.deny", "a"}, "freezer": {"freezer.state", "FROZEN"}, "blkio": {"blkio.reset_stats", "1"}} {
		dir := scratch(h)
		if err := os.Mkdir(inAgent(filepath.Join(dir, "child")), 0o755); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: mkdir through the agent's mounts: %v, want EROFS", h, err)
		}
		if err := os.WriteFile(inAgent(filepath.Join(dir, file[0])), []byte(file[1]), 0); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: writing %s through the agent's mounts: %v, want EROFS", h, file[0], err)
		}
	}
}

// TestSizerDeployedWithItsManifests.
func TestRBACIsLeast(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	ns := e.namespace(t)
	suffix := "-" + ns
	for _, dir := range []string{"base", "sizer", "size-policy"} {
		out, err := exec.Command(e.kubectl, "kustomize", "../../deploy/kustomize/"+dir).Output()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		for _, doc := range strings.Split(string(out), "\n---\n") {
			var meta struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatal(err)
			}
			switch meta.Kind {
			case "ClusterRole":
				var r rbacv1.ClusterRole
				if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
					t.Fatal(err)
				}
				sa := r.Name
				r.Name += suffix
				r.Labels = nil
				if _, err := e.cs.RbacV1().ClusterRoles().Create(ctx, &r, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = e.cs.RbacV1().ClusterRoles().Delete(context.Background(), r.Name, metav1.DeleteOptions{}) })
				b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r.Name},
					RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: r.Name},
					Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}
				if _, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_ = e.cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
				})
			case "Role":
				var r rbacv1.Role
				if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
					t.Fatal(err)
				}
				sa := r.Name
				r.Namespace, r.Labels = ns, nil
				if _, err := e.cs.RbacV1().Roles(ns).Create(ctx, &r, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				b := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r.Name},
					RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: r.Name},
					Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}
				if _, err := e.cs.RbacV1().RoleBindings(ns).Create(ctx, b, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// The webhook configuration rule names the real one; renamed roles
	// keep its name (no such object here; can-i asks RBAC only).
	other := e.namespace(t)
	for _, c := range []struct {
		sa, verb, what, sub, in string
		want                    bool
	}{
		{"cgwarden-sizer", "patch", "pods", "resize", ns, true},
		{"cgwarden-sizer", "patch", "pods", "resize", other, true},
		{"cgwarden-sizer", "patch", "pods", "", ns, false},
		{"cgwarden-sizer", "patch", "pods", "", "kube-system", false},
		{"cgwarden-sizer", "update", "pods", "", ns, false},
		{"cgwarden-sizer", "update", "pods", "resize", ns, false},
		{"cgwarden-sizer", "create", "pods", "", ns, false},
		{"cgwarden-sizer", "delete", "pods", "", ns, false},
		{"cgwarden-sizer", "create", "pods", "exec", ns, false},
		{"cgwarden-sizer", "patch", "pods", "status", ns, false},
		{"cgwarden-sizer", "list", "pods", "", other, true},
		{"cgwarden-sizer", "list", "nodes", "", "", true},
		{"cgwarden-sizer", "watch", "nodes", "", "", true},
		{"cgwarden-sizer", "patch", "nodes", "", "", false},
		{"cgwarden-sizer", "get", "secrets/cgwarden-sizer-ca", "", ns, true},
		{"cgwarden-sizer", "update", "secrets/cgwarden-sizer-ca", "", ns, false},
		{"cgwarden-sizer", "create", "secrets", "", ns, false},
		{"cgwarden-sizer", "get", "secrets/other", "", ns, false},
		{"cgwarden-sizer", "get", "secrets", "", other, false},
		// Nothing on its own webhook configuration (its caBundle is set
		// at install): test/scale's TestSizerCannotWidenItsWebhook makes
		// the patches themselves.
		{"cgwarden-sizer", "patch", "mutatingwebhookconfigurations/cgwarden-sizer", "", "", false},
		{"cgwarden-sizer", "get", "mutatingwebhookconfigurations/cgwarden-sizer", "", "", false},
		{"cgwarden-sizer", "patch", "mutatingwebhookconfigurations/other", "", "", false},
		{"cgwarden-sizer", "patch", "validatingwebhookconfigurations/cgwarden-sizer", "", "", false},
		{"cgwarden", "list", "pods", "", other, true},
		{"cgwarden", "watch", "pods", "", other, true},
		{"cgwarden", "create", "events", "", other, true},
		{"cgwarden", "create", "tokenreviews.authentication.k8s.io", "", "", true},
		{"cgwarden", "get", "pods", "", other, false},
		{"cgwarden", "patch", "pods", "", other, false},
		{"cgwarden", "create", "pods", "exec", other, false},
		{"cgwarden", "get", "secrets", "", other, false},
		{"cgwarden", "get", "nodes", "", "", false},
		{"cgwarden", "delete", "events", "", other, false},
		// Its Role (base/plugin.yaml, renamed into ns here): tokens of
		// its own ServiceAccount only, to sign the loopback listener's
		// answers (the policy cgwarden-answer-tokens limits them).
		{"cgwarden", "create", "serviceaccounts/cgwarden", "token", ns, true},
		{"cgwarden", "create", "serviceaccounts/cgwarden-reader", "token", ns, false},
		{"cgwarden", "create", "serviceaccounts/cgwarden", "token", other, false},
		// kubectl cgwarden's users (bound by the administrator): the
		// reader's tokens, never the agent's; port-forwards; reviews.
		{"cgwarden-plugin-user", "create", "serviceaccounts/cgwarden-reader", "token", ns, true},
		{"cgwarden-plugin-user", "create", "serviceaccounts/cgwarden", "token", ns, false},
		{"cgwarden-plugin-user", "create", "pods", "portforward", ns, true},
		{"cgwarden-plugin-user", "create", "pods", "exec", ns, false},
		{"cgwarden-plugin-user", "create", "tokenreviews.authentication.k8s.io", "", "", true},
		{"cgwarden-plugin-user", "get", "secrets", "", ns, false},
		{"cgwarden-plugin-user", "get", "nodes", "", "", false},
		// The size policy's role for the agent (its own ServiceAccount
		// here): list and watch of the policy and its binding by name
		// only, and of Nodes (its own, by field selector).
		{"cgwarden-size-trust", "list", "validatingadmissionpolicies.admissionregistration.k8s.io/cgwarden-size-annotation", "", "", true},
		{"cgwarden-size-trust", "watch", "validatingadmissionpolicybindings.admissionregistration.k8s.io/cgwarden-size-annotation", "", "", true},
		{"cgwarden-size-trust", "list", "validatingadmissionpolicies.admissionregistration.k8s.io", "", "", false},
		{"cgwarden-size-trust", "list", "validatingadmissionpolicies.admissionregistration.k8s.io/other", "", "", false},
		{"cgwarden-size-trust", "update", "validatingadmissionpolicies.admissionregistration.k8s.io/cgwarden-size-annotation", "", "", false},
		{"cgwarden-size-trust", "watch", "nodes", "", "", true},
		{"cgwarden-size-trust", "patch", "nodes", "", "", false},
		{"cgwarden-size-trust", "get", "secrets", "", other, false},
	} {
		args := []string{"--kubeconfig", e.kubeconfig, "auth", "can-i", c.verb, c.what, "--as=system:serviceaccount:" + ns + ":" + c.sa}
		if c.sub != "" {
			args = append(args, "--subresource="+c.sub)
		}
		if c.in != "" {
			args = append(args, "-n", c.in)
		}
		// Its answer on stdout ("yes"/"no", exit 1 for no); warnings go to
		// stderr.
		out, _ := exec.Command(e.kubectl, args...).Output()
		got := ""
		if f := strings.Fields(string(out)); len(f) > 0 {
			got = f[0]
		}
		desc := fmt.Sprintf("%s %s %s", c.verb, c.what, c.sub)
		if c.in != "" {
			desc += " in " + c.in
		}
		if want := map[bool]string{true: "yes", false: "no"}[c.want]; got != want {
			t.Errorf("can-i %s as %s: %q, want %s", desc, c.sa, got, want)
		} else {
			t.Logf("can-i %s as %s: %s", desc, c.sa, got)
		}
	}
}

// checkFixModeAgent: the fixing agent's process, read from the host,
// holds what the fix component names: uid 0, CapEff what the manifest
// names (none).
func checkFixModeAgent(t *testing.T, e *env) {
	t.Helper()
	pod, spec := e.agentPod(t)
	pid := containerPID(t, pod, "cgwarden")
	st := status(t, pid, "CapEff", "Uid")
	t.Logf("fix-mode agent (host pid %d): CapEff %s Uid %s", pid, st["CapEff"], st["Uid"])
	if got, want := capEff(t, pid), namedCaps(t, &spec.Containers[0]); got != want {
		t.Errorf("fix-mode agent: CapEff %#x, the manifest names %#x", got, want)
	}
}

// checkRestricted: the sizer's pod, as deploy/kustomize/sizer ships it,
// is admitted (a server-side dry run) in a namespace labelled as its
// Namespace is, and the same pod on the host network is refused there: the
// labels do enforce restricted.
func checkRestricted(t *testing.T, e *env, labels map[string]string, template map[string]any) {
	t.Helper()
	ctx := context.Background()
	if labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("the sizer's namespace labels %v: not enforce=restricted", labels)
	}
	ns := e.namespace(t)
	n, err := e.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range labels {
		if strings.HasPrefix(k, "pod-security.kubernetes.io/") {
			n.Labels[k] = v
		}
	}
	if _, err := e.cs.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(template)
	if err != nil {
		t.Fatal(err)
	}
	var tpl corev1.PodTemplateSpec
	if err := yaml.Unmarshal(b, &tpl); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sizer-as-shipped", Labels: tpl.Labels}, Spec: tpl.Spec}
	pod.Spec.ServiceAccountName = "" // its ServiceAccount is not in this namespace
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("the sizer's pod under Pod Security restricted: %v", err)
	} else {
		t.Log("the sizer's pod as shipped: admitted under Pod Security restricted")
	}
	pod.Spec.HostNetwork = true
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil || !strings.Contains(err.Error(), "PodSecurity") {
		t.Errorf("the same pod on the host network: %v, want a PodSecurity refusal (the labels enforce nothing)", err)
	}
}
