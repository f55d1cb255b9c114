package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	krand "k8s.io/apimachinery/pkg/util/rand"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// TestAgentRefusesAdoptionDecoy: issue 38's adoption decoy (item 5). A
// pod under the misplace runtime; the fix-mode agent
// (testdata/agent-adopt: pods from the API server, no CRI socket) adopts
// its container. Then a tenant with a delegated subtree (a scratch cgroup
// of the test's own, in the cpu hierarchy) makes a second cgroup named
// exactly like the container's literal one — the pod's UID and the
// container's real ID, which the pod's status lists — and puts a process
// of its own in it. Before, the agent took that cgroup for the container
// (the metadata confirms the ID) and moved the tenant's process into the
// pod's container cgroup, which it had made itself. Now it asks for the
// runtime's evidence (inventory.Evidence): the tenant's process is no
// child of the shim that started the pod's processes, so it is refused:
// after three more intervals the process is still in the decoy and the
// pod's container cgroup holds only the pod's processes; the agent's
// /metrics gives cgwarden_adoption_refused 1 and its log names the decoy.
func TestAgentRefusesAdoptionDecoy(t *testing.T) {
	e := cluster(t)
	importAgentImage(t)
	root, _ := cgroupRoot()
	ns := e.namespace(t)
	e.misplacedDeployment(t, ns, "victim", 1, "exec sleep 3600")
	victim := e.runningPods(t, ns, "victim", 1, 120*time.Second)
	var id, uid string
	for _, p := range victim {
		id, uid = containerID(p), string(p.UID)
	}
	e.installAgent(t, "testdata/agent-adopt-v1")
	for _, p := range victim {
		waitAdopted(t, root, p, id, 60*time.Second)
	}
	home := filepath.Join(root, "kubepods", "besteffort", "pod"+uid, id)
	pod := procs(home)

	deleg := filepath.Join(root, "cgwarden-delegated-"+krand.String(6))
	if err := os.Mkdir(deleg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(deleg) })
	decoy := filepath.Join(deleg, literalName(uid, id))
	if err := os.Mkdir(decoy, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(decoy) })
	intruder := exec.Command("sleep", "600")
	if err := intruder.Start(); err != nil {
		t.Fatal(err)
	}
	// Killed and reaped before the cgroups are removed (cleanups run
	// last-in first-out).
	t.Cleanup(func() { _ = intruder.Process.Kill(); _ = intruder.Wait() })
	pid := strconv.Itoa(intruder.Process.Pid)
	if err := os.WriteFile(filepath.Join(decoy, "cgroup.procs"), []byte(pid), 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("decoy of container %.12s of pod %s: pid %s in %s", id, uid, pid, decoy)

	get := e.agentReader(t, ns)
	refused := regexp.MustCompile(`(?m)^cgwarden_adoption_refused (\d+)$`)
	poll.Until(t, 60*time.Second, "cgwarden_adoption_refused 1 on the agent's /metrics", func() (bool, string, error) {
		code, body := get("/metrics")
		m := refused.FindStringSubmatch(body)
		return code == 200 && m != nil && m[1] == "1", strings.Join(m, " "), nil
	})
	time.Sleep(3 * agentInterval)
	if ps := procs(decoy); !slices.Contains(ps, pid) {
		t.Errorf("the tenant's process %s left the decoy %s (now in %s)", pid, decoy, cpuCgroupOf(pid))
	}
	for _, p := range procs(home) {
		if p == pid || !slices.Contains(pod, p) {
			t.Errorf("the pod's container cgroup %s holds %s, not one of the pod's processes %v", home, p, pod)
		}
	}
	logs, _ := runKubectl(e, "logs", "-n", "cgwarden-system", "ds/cgwarden", "-c", "cgwarden")
	if !strings.Contains(logs, "not adopting a misplaced cgroup the runtime does not confirm") ||
		!strings.Contains(logs, strings.TrimPrefix(decoy, root)) {
		t.Errorf("the agent's log does not name the refused decoy %s:\n%s", strings.TrimPrefix(decoy, root), tail(logs, 20))
	}
}
