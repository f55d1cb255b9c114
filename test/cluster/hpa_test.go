package cluster

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// hpaMax is the seed's HPA's maxReplicas brought to what a 2-core node
// holds beside the lane (the seed: 10): three busy pods at their 500m
// limit are 1.5 cores.
const hpaMax = 3

// TestSeedHPAScenario is seed 003's own acceptance test ("If Pod metrics
// were properly reported, the app replicas would increase") on the lane:
// the seed's Deployment (requests 100m/400Mi, limits 500m/600M; the lane's
// busybox and its misplace runtime in place of the Spin image and the
// wasmtime-spin-v2 class; a CPU loop switched on and off by a file on the
// node in place of bombardier's requests through the Service, which the
// lane's host-network pods have no proxy for) and the seed's HPA
// (averageUtilization 50; maxReplicas 3 instead of 10; scale-down
// stabilisation 0 s instead of the default 300 s, so the fall is seen in
// CI time). One Deployment and one load run go through the modes:
//
//  1. without cgwarden: the HPA scales up. On this stack metrics-server
//     sums the containers' series, which the kubelet takes from
//     containerd's CRI stats of each container's own cgroup wherever it
//     is (docs/findings.md: the seed's static `kubectl top` was its shim
//     reporting microseconds as nanoseconds, not the placement). What is
//     blind is the pod level: the Summary's pods[].cpu, the seed's step 2,
//     reads the empty pod cgroup (0) while its containers burn;
//  2. repair (the fixing agent with cgwarden nri,
//     testdata/agent-fix-nri-tls), metrics-server still reading the
//     kubelet: the pods' own figures are right, but the runtime's figures
//     for a moved container stay on the cgroup it made (0), so the HPA,
//     blind to the repaired containers, falls below its maximum under
//     load. Repair alone breaks the HPA on this stack;
//  3. metrics-server reading the agent (observe-only serving's figures,
//     from where each container's processes are): the HPA returns to its
//     maximum under load, and the pods it adds are placed right by the
//     NRI plugin from the start;
//  4. the load off: the HPA scales back to one replica.
//
// A second Deployment and HPA, in a namespace of their own, run the same
// phases under the second misplacement shape (usecClass: the misplace
// runtime behind a shim that reports CPU in microseconds, seed 003's own
// mechanism): without cgwarden `kubectl top` reads about 0m and the HPA
// stays at one replica under load (checkUsecBlind); repair leaves the
// shim's figures as they were (the HPA still at one); metrics-server
// reading the agent scales it to its maximum, and the pods added, placed
// right by cgwarden nri, are read right by the kubelet itself
// (checkUsecServed); the load off, back to one.
func TestSeedHPAScenario(t *testing.T) {
	e := cluster(t)
	importAgentImage(t)
	ns := e.namespace(t)
	root, _ := cgroupRoot()
	loadDir, err := os.MkdirTemp("", "cgwarden-hpa-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(loadDir) })
	on := filepath.Join(loadDir, "on")
	if err := os.WriteFile(on, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.seedDeployment(t, ns, loadDir, misplaceClass)
	e.seedHPA(t, ns)
	// The second shape, beside the first, under the same load switch: its
	// pods under usecClass.
	usec := e.namespace(t)
	e.seedDeployment(t, usec, loadDir, usecClass)
	e.seedHPA(t, usec)
	kubelet := e.kubeletClient(t)
	trace := e.traceHPA(ns, misplaceClass, kubelet, "without cgwarden")
	defer trace.stop(t)
	usecTrace := e.traceHPA(usec, usecClass, kubelet, "without cgwarden")
	defer usecTrace.stop(t)

	// 1. Without cgwarden.
	start := time.Now()
	e.waitReplicas(t, ns, 3*time.Minute, "the HPA at its maximum without cgwarden", func(n int32) bool { return n == hpaMax })
	t.Logf("without cgwarden: %d replicas %v after the Deployment was made (HPA: %s)", hpaMax, time.Since(start).Round(time.Second), e.hpaState(t, ns))
	pods := e.runningPods(t, ns, "spin-test", hpaMax, 2*time.Minute)
	for name, p := range pods {
		if !misplacedAtRoot(root, p) {
			t.Fatalf("pod %s is not misplaced by the misplace runtime", name)
		}
	}
	var blind map[string]podCPU
	poll.Until(t, 90*time.Second, "the kubelet's Summary: the pods at 0, their containers busy", func() (bool, string, error) {
		blind = summaryCPU(t, kubelet, ns)
		return everyPod(pods, blind, func(v podCPU) bool { return v.pod <= 0 && v.containers > 50e6 }), fmt.Sprint(blind), nil
	})
	t.Logf("without cgwarden, the Summary (nanocores): %v", blind)
	usecPods := e.checkUsecBlind(t, usec, kubelet)

	// 2. Repair, metrics-server still reading the kubelet: the pods' own
	// figures are right once their containers are moved home, but not
	// the containers'. cAdvisor now sees two cgroups for each container
	// (its containerd factory takes any cgroup whose name holds the ID),
	// and the kubelet keeps the newer only when it has both CPU and memory
	// RSS (pkg/kubelet/stats, filterTerminatedContainerInfoAndAssembleBy-
	// PodCgroupKey): the memory stayed charged to the runtime's cgroup
	// (no charge moving on v2, nor on v1 from Linux 6.13), so it keeps
	// neither and takes the runtime's CRI stats of its now empty cgroup,
	// 0. metrics-server sums those, and the HPA falls under load until a
	// moved container allocates memory anew (this CPU loop never does).
	trace.enter("repair; metrics-server reads the kubelet", nil)
	usecTrace.enter("repair; metrics-server reads the kubelet", nil)
	ca, cert, key := servingCert(t, e.node)
	agentCertSecret(t, e, cert, key)
	installAgent(t, e, "testdata/agent-fix-nri-tls")
	repaired := time.Now()
	agent, usecAgent := e.agentReader(t, ns), e.agentReader(t, usec)
	trace.enter("repair; metrics-server reads the kubelet", agent)
	usecTrace.enter("repair; metrics-server reads the kubelet", usecAgent)
	var moved map[string]podCPU
	poll.Until(t, 2*time.Minute, "the kubelet's pod figures right after repair", func() (bool, string, error) {
		moved = summaryCPU(t, kubelet, ns)
		return everyPod(pods, moved, func(v podCPU) bool { return v.pod > 200e6 }), fmt.Sprint(moved), nil
	})
	t.Logf("repair: the pods' own figures right %v after the agent was Ready; the Summary (nanocores): %v",
		time.Since(repaired).Round(time.Second), moved)
	e.waitReplicas(t, ns, 2*time.Minute, "the kubelet-backed HPA blind to the moved containers", func(n int32) bool { return n < hpaMax })
	t.Logf("repair, metrics-server reading the kubelet: %d replicas under load (HPA: %s)", e.replicas(t, ns), e.hpaState(t, ns))
	// The shim's figures follow its process wherever it is: repair
	// leaves them a thousand times low, and the HPA at one replica.
	var usecMoved map[string]podCPU
	poll.Until(t, 2*time.Minute, "the usec shape: the pod figures right after repair, the containers' still the shim's", func() (bool, string, error) {
		usecMoved = summaryCPU(t, kubelet, usec)
		return everyPod(usecPods, usecMoved, func(v podCPU) bool { return v.pod > 200e6 && v.containers < 5e6 }), fmt.Sprint(usecMoved), nil
	})
	if n := e.replicas(t, usec); n != 1 {
		t.Errorf("usec shape, repair, metrics-server reading the kubelet: %d replicas (HPA: %s), want 1: the shim's figures are the kubelet's", n, e.hpaState(t, usec))
	}
	t.Logf("usec shape, repair: %d replica (HPA: %s); the Summary (nanocores): %v", e.replicas(t, usec), e.hpaState(t, usec), usecMoved)

	// 3. Serving: metrics-server reading the agent, which reads each
	// container where its processes are (a moved container with its
	// emptied runtime cgroup's counter and charges: without them
	// metrics-server drops it as incomplete and the HPA reads unknown).
	// The HPA returns to its maximum, and the pods it adds are placed
	// right by cgwarden nri from the start.
	caFile := filepath.Join(t.TempDir(), "agent-ca.crt")
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	startMetricsServer(t, metricsServerAccount(t, e, ns), caFile)
	switchAPIService(t, e, cgwardenMetricsPort)
	served := time.Now()
	trace.enter("metrics-server reads cgwarden", nil)
	usecTrace.enter("metrics-server reads cgwarden", nil)
	e.waitReplicas(t, ns, 3*time.Minute, "the HPA at its maximum under load, metrics-server reading the agent", func(n int32) bool { return n == hpaMax })
	t.Logf("repair, metrics-server reading the agent: %d replicas %v after the switch (HPA: %s)",
		hpaMax, time.Since(served).Round(time.Second), e.hpaState(t, ns))
	fresh := 0
	for name, p := range e.runningPods(t, ns, "spin-test", hpaMax, 2*time.Minute) {
		if _, old := pods[name]; old {
			continue
		}
		fresh++
		home := filepath.Join(root, "kubepods", "burstable", "pod"+string(p.UID), containerID(p))
		if misplacedAtRoot(root, p) || len(procs(home)) == 0 {
			t.Errorf("pod %s, made with cgwarden nri installed: not in %s (misplaced at the root: %v)", p.Name, home, misplacedAtRoot(root, p))
		}
	}
	if fresh == 0 {
		t.Errorf("no pod made after cgwarden nri was installed (the HPA did not scale up again)")
	}
	e.holdsMax(t, ns, "repair and prevention, metrics-server reading the agent")
	// What metrics-server now reads: each pod's own figure and its
	// containers' agree (the kubelet's pod figure is 0 without cgwarden).
	// Both Deployments are at their maximum now, six busy pods on two
	// cores beside the other lanes: 0.1 core each at least.
	var agentSays map[string]podCPU
	poll.Until(t, time.Minute, "the agent's pod figures matching their containers'", func() (bool, string, error) {
		agentSays = summaryCPU(t, agent, ns)
		ok := len(agentSays) > 0
		for _, v := range agentSays {
			ok = ok && v.containers > 100e6 && math.Abs(v.pod-v.containers) <= 0.25*v.containers
		}
		return ok, fmt.Sprint(agentSays), nil
	})
	t.Logf("the agent's Summary (nanocores): %v", agentSays)
	e.checkUsecServed(t, usec, kubelet, usecPods)

	// 4. The load off.
	if err := os.Remove(on); err != nil {
		t.Fatal(err)
	}
	off := time.Now()
	trace.enter("load off", nil)
	usecTrace.enter("load off", nil)
	e.waitReplicas(t, ns, 3*time.Minute, "the HPA scales back to one replica", func(n int32) bool { return n == 1 })
	t.Logf("load off: one replica %v later (HPA: %s)", time.Since(off).Round(time.Second), e.hpaState(t, ns))
	e.waitReplicas(t, usec, time.Minute, "the usec shape's HPA back to one replica", func(n int32) bool { return n == 1 })
}

// everyPod reports whether ok holds for the figures of every pod of pods
// that is still in s (the others the HPA or the test removed), and for
// one at least.
func everyPod(pods map[string]*corev1.Pod, s map[string]podCPU, ok func(podCPU) bool) bool {
	present := 0
	for name := range pods {
		if v, found := s[name]; found {
			present++
			if !ok(v) {
				return false
			}
		}
	}
	return present > 0
}

// holdsMax checks that the HPA keeps the Deployment at hpaMax with a CPU
// utilisation above its target through two of its syncs (15 s each).
func (e *env) holdsMax(t *testing.T, ns, mode string) {
	t.Helper()
	for i := 0; i < 2; i++ {
		time.Sleep(15 * time.Second)
		h, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(context.Background(), "spinapp-autoscaler", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		util := cpuUtilisation(h)
		if h.Status.DesiredReplicas != hpaMax || util <= 50 {
			t.Errorf("%s: the HPA wants %d replicas at %d%% CPU (-1: unknown), want %d above 50%% under load", mode, h.Status.DesiredReplicas, util, hpaMax)
			return
		}
	}
	t.Logf("%s: %d replicas held for two syncs (HPA: %s)", mode, hpaMax, e.hpaState(t, ns))
}

// misplacedAtRoot reports whether p's container cgroup is the literal
// directory at the cpu hierarchy's root that the misplace runtime makes
// (the runwasi shim's name for a Burstable pod's container).
func misplacedAtRoot(root string, p *corev1.Pod) bool {
	_, err := os.Stat(filepath.Join(root, literalNameQoS("burstable", string(p.UID), containerID(p))))
	return err == nil
}

// cpuUtilisation is the HPA's current CPU utilisation in percent, -1
// while unknown.
func cpuUtilisation(h *autoscalingv2.HorizontalPodAutoscaler) int32 {
	for _, m := range h.Status.CurrentMetrics {
		if m.Resource != nil && m.Resource.Current.AverageUtilization != nil {
			return *m.Resource.Current.AverageUtilization
		}
	}
	return -1
}

// seedDeployment is seed 003's Deployment on the lane: one replica of a
// container under RuntimeClass class that burns CPU while loadDir/on
// exists on the node.
func (e *env) seedDeployment(t *testing.T, ns, loadDir, class string) {
	t.Helper()
	one, replicas := int64(1), int32(1)
	labels := map[string]string{"app": "spin-test"}
	loop := `while :; do if [ -e /load/on ]; then i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; else sleep 1; fi; done`
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "spin-test", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork: true, RuntimeClassName: &class, TerminationGracePeriodSeconds: &one,
					Containers: []corev1.Container{{Name: "spin-test", Image: busybox, ImagePullPolicy: corev1.PullNever,
						Command: []string{"sh", "-c", loop},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("400Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("600M")},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "load", MountPath: "/load", ReadOnly: true}}}},
					Volumes: []corev1.Volume{{Name: "load", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: loadDir}}}},
				},
			},
		},
	}
	if _, err := e.cs.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// seedHPA is seed 003's HPA (cpu averageUtilization 50, from one
// replica) with maxReplicas hpaMax and no scale-down stabilisation.
func (e *env) seedHPA(t *testing.T, ns string) {
	t.Helper()
	minR, fifty, zero := int32(1), int32(50), int32(0)
	h := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "spinapp-autoscaler", Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "spin-test"},
			MinReplicas:    &minR, MaxReplicas: hpaMax,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: &fifty}}}},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &zero}},
		},
	}
	if _, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(context.Background(), h, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// replicas is the Deployment's desired replica count, as the HPA set it.
func (e *env) replicas(t *testing.T, ns string) int32 {
	t.Helper()
	d, err := e.cs.AppsV1().Deployments(ns).Get(context.Background(), "spin-test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return *d.Spec.Replicas
}

// waitReplicas waits until the Deployment's desired replicas satisfy ok.
func (e *env) waitReplicas(t *testing.T, ns string, timeout time.Duration, what string, ok func(int32) bool) {
	t.Helper()
	poll.Until(t, timeout, what, func() (bool, string, error) {
		n := e.replicas(t, ns)
		return ok(n), fmt.Sprintf("%d replicas; HPA %s", n, e.hpaState(t, ns)), nil
	})
}

// hpaState is the HPA's current CPU utilisation and replica counts.
func (e *env) hpaState(t *testing.T, ns string) string {
	t.Helper()
	h, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(context.Background(), "spinapp-autoscaler", metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	util := "unknown"
	if u := cpuUtilisation(h); u >= 0 {
		util = fmt.Sprintf("%d%%", u)
	}
	return fmt.Sprintf("cpu %s/50%%, %d → %d replicas", util, h.Status.CurrentReplicas, h.Status.DesiredReplicas)
}
