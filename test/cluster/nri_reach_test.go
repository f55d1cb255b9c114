package cluster

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAgentCannotReachTheNRIContainer: issue 38, item 5. The fixing agent
// (uid 0, DAC_OVERRIDE alone, the host's PID namespace) and the nri container
// beside it (uid 0, whose NRI socket is root on the node) in one pod
// (testdata/agent-fix-nri: deploy/kustomize/nri with components/fix).
// The kernel lets a process open /proc/<pid>/root, environ and fd of
// another of its uid when the target's permitted capabilities are a
// subset of its own; with both at none (before), the agent could reach
// the nri container's root and its socket. The nri container now holds
// WAKE_ALARM, which the agent lacks. Read from the host: both uid 0, the
// agent's CapPrm what its manifest names (DAC_OVERRIDE, which lets no
// process reach another's /proc/<pid>/root), the nri container's exactly
// WAKE_ALARM. Then a pod
// with the fixing agent's exact securityContext, host namespaces, volumes
// and mounts (busybox in place of cgwarden, whose image has no shell)
// sees the nri process (its /proc/<pid>/cgroup reads) but is refused its
// /proc/<pid>/root (through its own /proc and the host's /host/proc), the
// NRI socket through it, its environ and fd; while it opens the root of a
// process of its own uid without capabilities (so the refusal is the
// capability's, not something else of the probe's).
func TestAgentCannotReachTheNRIContainer(t *testing.T) {
	e := cluster(t)
	if s := os.Getenv("CGWARDEN_CLUSTER_NRI"); s != "/var/lib/cgwarden-cluster/nri/nri.sock" {
		t.Fatalf("CGWARDEN_CLUSTER_NRI %q: testdata/agent-nri mounts /var/lib/cgwarden-cluster/nri", s)
	}
	importAgentImage(t)
	e.installAgent(t, "testdata/agent-fix-nri")
	pod, spec := e.agentPod(t)
	agent, nri := containerPID(t, pod, "cgwarden"), containerPID(t, pod, "nri")
	for _, c := range []struct {
		name string
		pid  int
		prm  uint64
	}{{"cgwarden", agent, namedCaps(t, &spec.Containers[0])}, {"nri", nri, 1 << capBits["WAKE_ALARM"]}} {
		st := status(t, c.pid, "Uid", "CapPrm", "CapEff")
		t.Logf("container %s (host pid %d): Uid %s CapPrm %s CapEff %s", c.name, c.pid, st["Uid"], st["CapPrm"], st["CapEff"])
		if uid := strings.Fields(st["Uid"]); len(uid) < 2 || uid[1] != "0" {
			t.Errorf("container %s runs as uid %v, want 0 (the test is about two processes of one uid)", c.name, uid)
		}
		prm, err := strconv.ParseUint(st["CapPrm"], 16, 64)
		if err != nil || prm != c.prm {
			t.Errorf("container %s: CapPrm %s, want %#x", c.name, st["CapPrm"], c.prm)
		}
	}

	script := fmt.Sprintf(`
N=%d
cat /proc/$N/cgroup >/dev/null 2>&1 && echo "nri-cgroup: ok" || echo "nri-cgroup: unreadable"
ls /proc/$N/root/ >/dev/null 2>&1 && echo "nri-root: open" || echo "nri-root: denied"
ls /host/proc/$N/root/ >/dev/null 2>&1 && echo "host-nri-root: open" || echo "host-nri-root: denied"
test -e /proc/$N/root/var/run/nri/nri.sock && echo "nri-socket: reachable" || echo "nri-socket: unreachable"
cat /proc/$N/environ >/dev/null 2>&1 && echo "nri-environ: open" || echo "nri-environ: denied"
readlink /proc/$N/fd/0 >/dev/null 2>&1 && echo "nri-fd: open" || echo "nri-fd: denied"
sleep 30 & S=$!
ls /proc/$S/root/ >/dev/null 2>&1 && echo "peer-root: open" || echo "peer-root: denied"
kill $S
grep -E '^(Uid|CapPrm|CapEff)' /proc/self/status
`, nri)
	start := time.Now()
	out := probeScript(t, e, pod, spec, "cgwarden", script)
	t.Logf("probed in %v", time.Since(start).Round(time.Second))
	for _, want := range []string{
		"nri-cgroup: ok", "nri-root: denied", "host-nri-root: denied", "nri-socket: unreachable",
		"nri-environ: denied", "nri-fd: denied", "peer-root: open",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("probe with the fixing agent's securityContext: no %q in:\n%s", want, out)
		}
	}
}
