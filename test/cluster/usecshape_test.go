package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// usecClass is the RuntimeClass of the lane's second misplacement shape:
// the misplace runtime behind test/cluster/usecshim, a shim whose Stats
// report the containers' CPU in microseconds where containerd reads
// nanoseconds, as seed 003's shim did (docs/findings.md, "Why `kubectl
// top` was static on seed 003's stack").
const usecClass = "misplace-usec"

// checkUsecBlind is seed 003's symptom, reproduced under usecClass
// without cgwarden: the Deployment's pod burns half a core, but the
// kubelet reads its container at about 0.0005 cores (the shim's
// microseconds; cAdvisor has no entry it matches to the misplaced
// container, so the CRI figure stays), its pod at 0 (the empty pod
// cgroup), `kubectl top` at about 0m, and the HPA stays at one replica
// under load. It returns the Deployment's pods.
func (e *env) checkUsecBlind(t *testing.T, ns string, kubelet func(string) (int, string)) map[string]*corev1.Pod {
	t.Helper()
	root, _ := cgroupRoot()
	pods := e.runningPods(t, ns, "spin-test", 1, 2*time.Minute)
	p := slices.Collect(maps.Values(pods))[0]
	if !misplacedAtRoot(root, p) {
		t.Fatalf("usec shape: pod %s is not misplaced by the misplace runtime", p.Name)
	}
	truth := runCores(t, containerDir(root, p, containerID(p)), 5*time.Second)
	var s map[string]podCPU
	poll.Until(t, 2*time.Minute, "usec shape: the HPA reading the pod, the kubelet's Summary", func() (bool, string, error) {
		s = summaryCPU(t, kubelet, ns)
		v, ok := s[p.Name]
		return ok && v.containers > 0 && e.hpaUtil(t, ns) >= 0, fmt.Sprintf("Summary %v; HPA %s", s, e.hpaState(t, ns)), nil
	})
	top, err := metricsPodCPU(e.metrics, ns, p.Name)
	if err != nil {
		t.Fatal(err)
	}
	v := s[p.Name]
	t.Logf("usec shape without cgwarden: the pod burns %.3f cores; the kubelet reads its container at %.0f nanocores (the seed: 497486) and the pod at %.0f; `kubectl top` %dm; HPA %s",
		truth, v.containers, v.pod, top, e.hpaState(t, ns))
	if truth < 0.3 {
		t.Fatalf("usec shape: the pod burns only %.3f cores: nothing to compare", truth)
	}
	if v.containers > 5e6 || v.pod > 5e6 || top > 5 {
		t.Errorf("usec shape without cgwarden: the kubelet reads the container at %.0f and the pod at %.0f nanocores, `kubectl top` %dm; want under 5m each (the shim's microseconds)", v.containers, v.pod, top)
	}
	if n, u := e.replicas(t, ns), e.hpaUtil(t, ns); n != 1 || u > 5 {
		t.Errorf("usec shape without cgwarden: %d replicas at %d%% under load, want 1 at 5%% or less (seed 003: the HPA never scales)", n, u)
	}
	return pods
}

// checkUsecServed: with metrics-server reading the agent, which reads the
// kernel's figures where the processes are, the usec shape's HPA scales
// to its maximum; the pods it adds are placed right by cgwarden nri, so
// the kubelet itself reads them right (cAdvisor's figures of a container
// it matches replace the CRI's).
func (e *env) checkUsecServed(t *testing.T, ns string, kubelet func(string) (int, string), old map[string]*corev1.Pod) {
	t.Helper()
	root, _ := cgroupRoot()
	served := time.Now()
	e.waitReplicas(t, ns, 3*time.Minute, "usec shape: the HPA at its maximum, metrics-server reading the agent", func(n int32) bool { return n == hpaMax })
	t.Logf("usec shape, metrics-server reading the agent: %d replicas %v after the first shape's were held (HPA: %s)", hpaMax, time.Since(served).Round(time.Second), e.hpaState(t, ns))
	fresh := map[string]*corev1.Pod{}
	for name, p := range e.runningPods(t, ns, "spin-test", hpaMax, 2*time.Minute) {
		if _, was := old[name]; !was {
			fresh[name] = p
			if misplacedAtRoot(root, p) {
				t.Errorf("usec shape: pod %s, made with cgwarden nri installed, is misplaced at the root", name)
			}
		}
	}
	if len(fresh) == 0 {
		t.Fatal("usec shape: no pod made after cgwarden nri was installed")
	}
	var s map[string]podCPU
	poll.Until(t, 90*time.Second, "usec shape: the kubelet reading the pods cgwarden nri placed", func() (bool, string, error) {
		s = summaryCPU(t, kubelet, ns)
		return everyPod(fresh, s, func(v podCPU) bool { return v.containers > 100e6 && v.pod > 100e6 }), fmt.Sprint(s), nil
	})
	t.Logf("usec shape: the kubelet reads the pods cgwarden nri placed right, their containers included (nanocores): %v", s)
}

// hpaUtil is the HPA's current CPU utilisation in percent, -1 unknown.
func (e *env) hpaUtil(t *testing.T, ns string) int32 {
	t.Helper()
	h, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(context.Background(), "spinapp-autoscaler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cpuUtilisation(h)
}

// runCores is the CPU the processes of cgroup dir use over d, in cores,
// from their own run time.
func runCores(t *testing.T, dir string, d time.Duration) float64 {
	t.Helper()
	var pids []int
	for _, pid := range procs(dir) {
		pids = append(pids, atoi(pid))
	}
	a := runNs(t, pids)
	time.Sleep(d)
	return float64(runNs(t, pids)-a) / float64(d.Nanoseconds())
}
