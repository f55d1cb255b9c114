package cluster

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// consumerWindow is how long each phase's CPU is measured: two of the
// kubelet's housekeeping rounds at least, so that its counters move.
const consumerWindow = 25 * time.Second

// A consumer pod of TestPodMetricsConsumers: its spec, the CPU its
// processes are pinned to, and once running, the pod and its processes.
type consumer struct {
	name, class string
	cpu         int // the CPU its processes are pinned to
	pod         *corev1.Pod
	pids        []int
}

// TestPodMetricsConsumers measures, for a pod whose containers the
// misplace runtime put at the hierarchy's root (seed 003's shape), what
// each consumer of pod metrics in docs/metrics.md's table reads, without
// cgwarden and then with the fixing agent, cgwarden nri beside it and the
// agent serving: the kubelet's /metrics/resource pod and container
// series; cAdvisor's series as the kubernetes-mixin selects them
// (/metrics/cadvisor, image!="" and container!="", summed by pod); the
// memory the kubelet's eviction ranking reads (the Summary's
// pods[].memory.workingSetBytes: pkg/kubelet/eviction rankMemoryPressure
// orders by usage over request from it); the CPU a misplaced Burstable
// and BestEffort container get under a hog, against twins placed right;
// and a pod-level CPU limit over two containers. The truth each is held
// against is the kernel's: the run time of the containers' own processes
// (/proc/<pid>/task/*/schedstat), wherever their cgroups are.
//
// The contention set (the twins and a Guaranteed hog of 600m) is
// pinned to CPU 1, the pod-level-limit pod to CPU 0, so that the shares
// decide and the limit, not the machine, caps.
func TestPodMetricsConsumers(t *testing.T) {
	e := cluster(t)
	importAgentImage(t)
	// The module lanes' burner tests pin to the same CPUs beside this
	// lane: one measures at a time.
	realtest.LockCPU(t)
	ns := e.namespace(t)
	root, _ := cgroupRoot()
	kubelet := e.kubeletClient(t)
	loadDir, err := os.MkdirTemp("", "cgwarden-consumers-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(loadDir) })

	pods := []*consumer{
		{name: "mis-bu", class: misplaceClass, cpu: 1},
		{name: "ok-bu", cpu: 1},
		{name: "mis-be", class: misplaceClass, cpu: 1},
		{name: "ok-be", cpu: 1},
		{name: "hog", cpu: 1},
		{name: "mis-pl", class: misplaceClass, cpu: 0},
	}
	for _, c := range pods {
		if _, err := e.cs.CoreV1().Pods(ns).Create(context.Background(), consumerPod(ns, c, loadDir), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range pods {
		e.startConsumer(t, ns, root, c)
	}
	byName := map[string]*consumer{}
	for _, c := range pods {
		byName[c.name] = c
	}
	for _, n := range []string{"mis-bu", "mis-be", "mis-pl"} {
		if p := byName[n].pod; !misplacedAtRootAny(root, p) {
			t.Fatalf("pod %s is not misplaced by the misplace runtime", n)
		}
	}
	e.logShares(t, root, byName)

	// Without cgwarden.
	before := e.measureConsumers(t, kubelet, nil, ns, pods)
	before.log(t, "without cgwarden")
	before.checkWithout(t, sharedQuota(t, root, byName["mis-pl"].pids))
	plQuota := filepath.Join(root, "kubepods", "burstable", "pod"+string(byName["mis-pl"].pod.UID), "cpu.cfs_quota_us")
	t.Logf("without cgwarden: the pod-level limit is on the pod cgroup (%s: %d), which holds %d processes",
		plQuota, readInt(t, plQuota), len(procs(filepath.Dir(plQuota))))

	// The fixing agent, cgwarden nri beside it, serving.
	_, cert, key := servingCert(t, e.node)
	agentCertSecret(t, e, cert, key)
	installAgent(t, e, "testdata/agent-fix-nri-tls")
	for _, n := range []string{"mis-bu", "mis-be", "mis-pl"} {
		c := byName[n]
		poll.Until(t, 2*time.Minute, "the agent moving "+n+"'s processes under its pod", func() (bool, string, error) {
			for _, pid := range c.pids {
				if cg := cpuCgroupOf(strconv.Itoa(pid)); !strings.HasPrefix(cg, "/kubepods/") {
					return false, fmt.Sprintf("process %d in %s", pid, cg), nil
				}
			}
			return true, "", nil
		})
	}
	// A twin made with cgwarden nri installed is placed right from the
	// start; the Burstable pods then write a second chunk, which after a
	// repair is charged where the processes now are.
	nri := &consumer{name: "nri-bu", class: misplaceClass, cpu: 1}
	if _, err := e.cs.CoreV1().Pods(ns).Create(context.Background(), consumerPod(ns, nri, loadDir), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.startConsumer(t, ns, root, nri)
	if misplacedAtRootAny(root, nri.pod) {
		t.Fatalf("pod nri-bu, made with cgwarden nri installed, is misplaced at the root")
	}
	pods = append(pods, nri)
	byName[nri.name] = nri
	if err := os.WriteFile(filepath.Join(loadDir, "more"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	agent := e.agentReader(t, ns)
	e.logShares(t, root, byName)
	after := e.measureConsumers(t, kubelet, agent, ns, pods)
	after.log(t, "with cgwarden (repair, nri, serving)")
	after.checkWith(t, sharedQuota(t, root, byName["mis-pl"].pids))
}

// consumerPod is c's pod: busybox on the host network burning CPU. The
// Burstable ones (-bu: 200m CPU and 16Mi memory requested) first write
// 40 MiB to a memory-backed emptyDir, and 16 MiB more once loadDir/more
// exists; the BestEffort ones (-be) only burn; the hog is Guaranteed at
// 600m; mis-pl has two burning containers under a pod-level limit of
// 300m and no limit of their own.
func consumerPod(ns string, c *consumer, loadDir string) *corev1.Pod {
	one := int64(1)
	burn := "while :; do :; done"
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: ns},
		Spec:       corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: &one},
	}
	if c.class != "" {
		p.Spec.RuntimeClassName = &c.class
	}
	ctr := func(name, script string) corev1.Container {
		return corev1.Container{Name: name, Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sh", "-c", script}}
	}
	cpuMem := func(cpu, mem string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	switch {
	case strings.HasSuffix(c.name, "-bu"):
		script := "dd if=/dev/zero of=/fill/a bs=1M count=40 2>/dev/null; " +
			"while :; do i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done; " +
			"if [ -e /load/more ] && [ ! -e /fill/b ]; then dd if=/dev/zero of=/fill/b bs=1M count=16 2>/dev/null; fi; done"
		m := ctr("main", script)
		m.Resources.Requests = cpuMem("200m", "16Mi")
		m.VolumeMounts = []corev1.VolumeMount{{Name: "fill", MountPath: "/fill"}, {Name: "load", MountPath: "/load", ReadOnly: true}}
		p.Spec.Containers = []corev1.Container{m}
		p.Spec.Volumes = []corev1.Volume{
			{Name: "fill", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
				Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(128<<20, resource.BinarySI)}}},
			{Name: "load", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: loadDir}}},
		}
	case c.name == "hog":
		m := ctr("main", burn)
		m.Resources.Requests, m.Resources.Limits = cpuMem("600m", "32Mi"), cpuMem("600m", "32Mi")
		p.Spec.Containers = []corev1.Container{m}
	case c.name == "mis-pl":
		p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("300m")}}
		p.Spec.Containers = []corev1.Container{ctr("a", burn), ctr("b", burn)}
	default: // BestEffort
		p.Spec.Containers = []corev1.Container{ctr("main", burn)}
	}
	return p
}

// startConsumer waits for c's pod to run, finds its containers' shells
// (in the runtime's literal cgroup or where the kubelet asked) and pins
// them to c.cpu (what they fork later inherits it).
func (e *env) startConsumer(t *testing.T, ns, root string, c *consumer) {
	t.Helper()
	want := len(consumerPod(ns, c, "").Spec.Containers)
	poll.Until(t, 2*time.Minute, "pod "+c.name+" running with its processes", func() (bool, string, error) {
		p, err := e.cs.CoreV1().Pods(ns).Get(context.Background(), c.name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		c.pod, c.pids = p, nil
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != want {
			return false, describe(p), nil
		}
		for _, cs := range p.Status.ContainerStatuses {
			// One process, its shell: the first write's dd has ended
			// (a PID that ends would fail the measurement).
			ps := procs(containerDir(root, p, strings.TrimPrefix(cs.ContainerID, "containerd://")))
			if len(ps) != 1 {
				return false, fmt.Sprintf("%d processes in container %s, want its shell alone", len(ps), cs.Name), nil
			}
			for _, s := range ps {
				c.pids = append(c.pids, atoi(s))
			}
		}
		return true, "", nil
	})
	var set unix.CPUSet
	set.Set(c.cpu)
	for _, pid := range c.pids {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, task := range tasks {
			if err := unix.SchedSetaffinity(atoi(task.Name()), &set); err != nil {
				t.Fatalf("pinning %s's task %s to CPU %d: %v", c.name, task.Name(), c.cpu, err)
			}
		}
	}
}

// containerDir is where container id of p is: the runtime's literal
// directory at the root when it made one, else the kubelet's path.
func containerDir(root string, p *corev1.Pod, id string) string {
	qos := strings.ToLower(string(p.Status.QOSClass))
	lit := filepath.Join(root, literalNameQoS(qos, string(p.UID), id))
	if _, err := os.Stat(lit); err == nil {
		return lit
	}
	if p.Status.QOSClass == corev1.PodQOSGuaranteed {
		return filepath.Join(root, "kubepods", "pod"+string(p.UID), id)
	}
	return filepath.Join(root, "kubepods", qos, "pod"+string(p.UID), id)
}

// runNs is the run time of processes pids, their threads' summed.
func runNs(t *testing.T, pids []int) int64 {
	t.Helper()
	var sum int64
	for _, pid := range pids {
		n, err := threadsRunNs(pid)
		if err != nil {
			t.Fatalf("process %d: %v", pid, err)
		}
		sum += n
	}
	return sum
}

// misplacedAtRootAny reports whether any container of p is in the
// runtime's literal directory at the root.
func misplacedAtRootAny(root string, p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if dir := containerDir(root, p, strings.TrimPrefix(cs.ContainerID, "containerd://")); filepath.Dir(dir) == root {
			return true
		}
	}
	return false
}

// logShares logs the cpu.shares that decide the contention on CPU 1: the
// root's competitors (kubepods and the misplaced containers) and, inside
// kubepods, the hog and the two tiers.
func (e *env) logShares(t *testing.T, root string, pods map[string]*consumer) {
	t.Helper()
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, rel, "cpu.shares"))
		if err != nil {
			return "?"
		}
		return strings.TrimSpace(string(b))
	}
	var parts []string
	for _, rel := range []string{"kubepods", "kubepods/burstable", "kubepods/besteffort"} {
		parts = append(parts, rel+" "+read(rel))
	}
	for _, n := range []string{"hog", "mis-bu", "ok-bu", "nri-bu", "mis-be", "ok-be"} {
		c := pods[n]
		if c == nil || len(c.pids) == 0 {
			continue
		}
		cg := cpuCgroupOf(strconv.Itoa(c.pids[0]))
		parts = append(parts, fmt.Sprintf("%s at %s %s", n, cg, read(cg)))
	}
	t.Logf("cpu.shares: %s", strings.Join(parts, "; "))
}

// consumerFigures is what each source said of each pod over one window.
type consumerFigures struct {
	window time.Duration
	truth  map[string]float64 // cores, from the processes' run time
	// The kubelet's /metrics/resource, as rates over its own timestamps
	// (NaN: the counter did not move in time, or is absent).
	resPod, resContainers map[string]float64
	// The kubelet's /metrics/cadvisor as the mixin selects it.
	cadvisor map[string]float64
	// Memory at the window's end (bytes): the Summary's pod figure (what
	// eviction ranks by), its containers' sum, cAdvisor's as the mixin
	// selects it, the agent's pod figure.
	memPod, memContainers, memCadvisor, memAgent map[string]float64
	// The agent's /metrics/resource pod CPU (nil without an agent).
	agentPod map[string]float64
}

// measureConsumers samples every source at the start and the end of one
// window; agent is nil without cgwarden.
func (e *env) measureConsumers(t *testing.T, kubelet, agent func(string) (int, string), ns string, pods []*consumer) *consumerFigures {
	t.Helper()
	type snap struct {
		at                   time.Time
		run                  map[string]int64
		resPod, resCtr, cadv map[string]podSample
		agentPod             map[string]podSample
	}
	take := func() snap {
		s := snap{at: time.Now(), run: map[string]int64{}}
		for _, c := range pods {
			s.run[c.name] = runNs(t, c.pids)
		}
		res := scrape(t, kubelet, "/metrics/resource")
		s.resPod = perPod(res["pod_cpu_usage_seconds_total"], ns, nil)
		s.resCtr = perPod(res["container_cpu_usage_seconds_total"], ns, nil)
		s.cadv = perPod(scrape(t, kubelet, "/metrics/cadvisor")["container_cpu_usage_seconds_total"], ns, mixinSelects)
		if agent != nil {
			s.agentPod = perPod(scrape(t, agent, "/metrics/resource")["pod_cpu_usage_seconds_total"], ns, nil)
		}
		return s
	}
	// The window opens once the kubelet and the agent each have every
	// pod's series: a pod made or repaired just before (nri-bu, the
	// moved containers) can take a housekeeping interval or a scan to
	// appear, and a rate needs it at both ends.
	var a snap
	poll.Until(t, time.Minute, "every pod's pod_cpu_usage_seconds_total from the kubelet and the agent", func() (bool, string, error) {
		a = take()
		var missing []string
		for _, c := range pods {
			if _, ok := a.resPod[c.name]; !ok {
				missing = append(missing, "the kubelet's "+c.name)
			}
			if _, ok := a.agentPod[c.name]; !ok && agent != nil {
				missing = append(missing, "the agent's "+c.name)
			}
		}
		return len(missing) == 0, "missing: " + strings.Join(missing, ", "), nil
	})
	time.Sleep(consumerWindow)
	b := take()
	f := &consumerFigures{window: b.at.Sub(a.at), truth: map[string]float64{}}
	for n, v := range b.run {
		f.truth[n] = float64(v-a.run[n]) / float64(f.window.Nanoseconds())
	}
	f.resPod, f.resContainers, f.cadvisor = rates(a.resPod, b.resPod), rates(a.resCtr, b.resCtr), rates(a.cadv, b.cadv)
	if agent != nil {
		f.agentPod = rates(a.agentPod, b.agentPod)
	}
	res := scrape(t, kubelet, "/metrics/resource")
	f.memPod = values(perPod(res["pod_memory_working_set_bytes"], ns, nil))
	f.memContainers = values(perPod(res["container_memory_working_set_bytes"], ns, nil))
	f.memCadvisor = values(perPod(scrape(t, kubelet, "/metrics/cadvisor")["container_memory_working_set_bytes"], ns, mixinSelects))
	if agent != nil {
		f.memAgent = values(perPod(scrape(t, agent, "/metrics/resource")["pod_memory_working_set_bytes"], ns, nil))
	}
	return f
}

// podSample is a per-pod sum of series and the newest timestamp among them.
type podSample struct {
	v  float64
	ms int64
}

// mixinSelects is the kubernetes-mixin's selection of cAdvisor's
// container series (its container recording rules and pod panels:
// image!="", container!=""), which leaves out the pod cgroup's own.
func mixinSelects(labels map[string]string) bool {
	return labels["image"] != "" && labels["container"] != "" && labels["container"] != "POD"
}

// scrape reads path from get as Prometheus text.
func scrape(t *testing.T, get func(string) (int, string), path string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(path)
	if code != 200 {
		t.Fatalf("%s: %d %.300s", path, code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return fams
}

// perPod sums f's series of namespace ns by pod (those keep selects).
func perPod(f *dto.MetricFamily, ns string, keep func(map[string]string) bool) map[string]podSample {
	out := map[string]podSample{}
	if f == nil {
		return out
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["namespace"] != ns || (keep != nil && !keep(labels)) {
			continue
		}
		v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		s := out[labels["pod"]]
		s.v += v
		s.ms = max(s.ms, m.GetTimestampMs())
		out[labels["pod"]] = s
	}
	return out
}

// rates is each pod's rate from a to b over their own timestamps (the
// window's length when the source gives none); NaN when the counter did
// not move in time or is missing at either end.
func rates(a, b map[string]podSample) map[string]float64 {
	out := map[string]float64{}
	for pod, y := range b {
		x, ok := a[pod]
		switch {
		case !ok:
			out[pod] = math.NaN()
		case y.ms == 0 || x.ms == 0:
			out[pod] = math.NaN() // every source here timestamps its samples
		case y.ms == x.ms:
			out[pod] = math.NaN()
		default:
			out[pod] = (y.v - x.v) / (float64(y.ms-x.ms) / 1000)
		}
	}
	return out
}

func values(m map[string]podSample) map[string]float64 {
	out := map[string]float64{}
	for k, s := range m {
		out[k] = s.v
	}
	return out
}

// log writes the figures of one phase, a line per pod.
func (f *consumerFigures) log(t *testing.T, phase string) {
	t.Helper()
	for _, n := range []string{"mis-bu", "ok-bu", "nri-bu", "mis-be", "ok-be", "hog", "mis-pl"} {
		truth, ok := f.truth[n]
		if !ok {
			continue
		}
		line := fmt.Sprintf("%s, %s: truth %.3f cores; kubelet /metrics/resource pod %.3f, containers %.3f; cAdvisor (mixin) %.3f; memory MiB: Summary pod %.1f, containers %.1f, cAdvisor (mixin) %.1f",
			phase, n, truth, f.resPod[n], f.resContainers[n], f.cadvisor[n], mib64(f.memPod[n]), mib64(f.memContainers[n]), mib64(f.memCadvisor[n]))
		if f.agentPod != nil {
			line += fmt.Sprintf("; the agent: pod %.3f cores, %.1f MiB", f.agentPod[n], mib64(f.memAgent[n]))
		}
		t.Log(line)
	}
}

func mib64(b float64) float64 { return b / (1 << 20) }

// near reports whether got is within a factor of 2 of want (false for
// NaN): the kubelet's rates are over its own housekeeping samples, which
// a 25 s window holds two or three of; what this tells apart is a right
// figure from a blind one, 0 or a thousandth.
func near(got, want float64) bool {
	return got >= want/2 && got <= want*2
}

// checkWithout asserts what a misplaced pod's consumers read without
// cgwarden: the pod-level figures blind, the container-level ones right,
// the misplaced Burstable container short of its twin's CPU, and the
// pod-level limit escaped.
//
// quota is the cgroup whose CFS quota holds all of mis-pl's processes
// ("" when none does).
func (f *consumerFigures) checkWithout(t *testing.T, quota string) {
	t.Helper()
	mis := f.truth["mis-bu"]
	if mis < 0.05 {
		t.Fatalf("mis-bu burned %.3f cores: the measurement has nothing to compare", mis)
	}
	if v := f.resPod["mis-bu"]; !(v < mis/10) {
		t.Errorf("without cgwarden: /metrics/resource's pod_cpu_usage_seconds_total of the misplaced pod is %.3f, want about 0 (the empty pod cgroup) for %.3f cores", v, mis)
	}
	if v := f.resContainers["mis-bu"]; !near(v, mis) {
		t.Errorf("without cgwarden: /metrics/resource's container series of the misplaced pod sum to %.3f cores, want about %.3f (containerd's CRI stats of the container's own cgroup)", v, mis)
	}
	if v := f.cadvisor["mis-bu"]; !near(v, mis) {
		t.Errorf("without cgwarden: cAdvisor's container series, as the mixin selects them, give the misplaced pod %.3f cores, want about %.3f", v, mis)
	}
	if v := f.memPod["mis-bu"]; !(v < 8<<20) || !(f.memContainers["mis-bu"] >= 40<<20) {
		t.Errorf("without cgwarden: the kubelet reads the misplaced pod's memory (what eviction ranks by) at %.1f MiB and its container's at %.1f; want about 0 and 40 MiB or more",
			mib64(v), mib64(f.memContainers["mis-bu"]))
	}
	if r := mis / f.truth["ok-bu"]; !(r < 0.8) {
		t.Errorf("without cgwarden: the misplaced Burstable container got %.2f of its placed twin's CPU under the hog; want less than 0.8 (weighed at the root beside all of kubepods)", r)
	}
	// The limit escaped: the two containers are under no one quota, and,
	// where CPU 0 has the room, they use more than it. CFS holds a
	// throttled cgroup to its quota in each 100 ms period, so over the
	// seconds measured 10 % above it is out of its reach; the two burners
	// would take 600m, but weighed at the root (cpu.shares 2: no request)
	// they get only what CPU 0 leaves, which beside the other lanes may be
	// less than 330m.
	if quota != "" {
		t.Errorf("without cgwarden: the pod with a 300m pod-level limit has its containers under one quota (%s); want each under its own or none (each misplaced container gets the limit to itself)", quota)
	}
	if v := f.truth["mis-pl"]; v > 0.33 {
		t.Logf("without cgwarden: the pod with a 300m pod-level limit used %.3f cores, above its limit", v)
	} else if quota == "" {
		t.Logf("without cgwarden: the pod with a 300m pod-level limit used %.3f cores, its containers under no one quota: CPU 0 was too busy to show it above the limit", v)
	}
}

// sharedQuota is a cgroup with a CFS quota (cpu.cfs_quota_us other than
// -1) that every one of pids is in, or beneath, or "" when there is none:
// each under a quota of its own, or under none.
func sharedQuota(t *testing.T, root string, pids []int) string {
	t.Helper()
	var shared []string
	for i, pid := range pids {
		cg := cpuCgroupOf(strconv.Itoa(pid))
		if cg == "" {
			t.Fatalf("process %d: its cpu cgroup unread", pid)
		}
		var quotas []string
		for dir := filepath.Join(root, cg); strings.HasPrefix(dir, root+"/"); dir = filepath.Dir(dir) {
			if readInt(t, filepath.Join(dir, "cpu.cfs_quota_us")) != -1 && (i == 0 || slices.Contains(shared, dir)) {
				quotas = append(quotas, dir)
			}
		}
		shared = quotas
	}
	if len(shared) == 0 {
		return ""
	}
	return shared[0]
}

// checkWith asserts what the same consumers read with cgwarden: the
// kubelet's pod figures follow the moved processes, its twins share
// alike, the pod-level limit holds, the agent serves the pod right, and
// a pod made with cgwarden nri installed is read right everywhere,
// memory included.
//
// quota is the cgroup whose CFS quota holds all of mis-pl's processes,
// the pod's.
func (f *consumerFigures) checkWith(t *testing.T, quota string) {
	t.Helper()
	mis := f.truth["mis-bu"]
	if v := f.resPod["mis-bu"]; !near(v, mis) {
		t.Errorf("with cgwarden: /metrics/resource's pod_cpu_usage_seconds_total of the repaired pod is %.3f cores, want about %.3f", v, mis)
	}
	if v := f.agentPod["mis-bu"]; !near(v, mis) {
		t.Errorf("with cgwarden: the agent's pod_cpu_usage_seconds_total of the repaired pod is %.3f cores, want about %.3f", v, mis)
	}
	// Memory charged before the move stays with the runtime's cgroup
	// (no charge moving from Linux 6.13): the kubelet's pod figure, and
	// so eviction's ranking, counts only what was allocated after it;
	// the agent counts both.
	if v := f.memPod["mis-bu"]; !(v >= 14<<20) {
		t.Errorf("with cgwarden: the kubelet reads the repaired pod's memory at %.1f MiB, want the 16 MiB written after the repair at least", mib64(v))
	}
	if v := f.memAgent["mis-bu"]; !(v >= 56<<20) {
		t.Errorf("with cgwarden: the agent reads the repaired pod's memory at %.1f MiB, want 56 MiB or more (40 before the repair, 16 after)", mib64(v))
	}
	if r := mis / f.truth["ok-bu"]; !(r > 0.75 && r < 1.33) {
		t.Errorf("with cgwarden: the repaired Burstable container got %.2f of its twin's CPU under the hog; want about 1", r)
	}
	if r := f.truth["nri-bu"] / f.truth["ok-bu"]; !(r > 0.75 && r < 1.33) {
		t.Errorf("with cgwarden: the Burstable container placed by cgwarden nri got %.2f of its twin's CPU under the hog; want about 1", r)
	}
	if v := f.truth["mis-pl"]; !(v < 0.33) || quota == "" {
		t.Errorf("with cgwarden: the pod with a 300m pod-level limit used %.3f cores after repair, its containers under one quota at %q; want 0.33 at most, under the pod's quota", v, quota)
	}
	nri := f.truth["nri-bu"]
	if v := f.resPod["nri-bu"]; !near(v, nri) {
		t.Errorf("with cgwarden nri: /metrics/resource's pod_cpu_usage_seconds_total of the pod it placed is %.3f cores, want about %.3f", v, nri)
	}
	if v := f.memPod["nri-bu"]; !(v >= 56<<20) {
		t.Errorf("with cgwarden nri: the kubelet reads the pod it placed at %.1f MiB of memory (what eviction ranks by), want 56 MiB or more", mib64(v))
	}
}
