package serve_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// summaryOf is a one-pod summary: pod figures, then name, CPU seconds and
// working set per container.
func summaryOf(pod string, cpu float64, ws uint64, ctrs ...any) statsapi.Summary {
	at := metav1.NewTime(time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC))
	stats := func(cpu float64, ws uint64) (*statsapi.CPUStats, *statsapi.MemoryStats) {
		ns := uint64(cpu * 1e9)
		return &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: &ns}, &statsapi.MemoryStats{Time: at, WorkingSetBytes: &ws}
	}
	p := statsapi.PodStats{PodRef: statsapi.PodReference{Name: pod, Namespace: "default"}}
	p.CPU, p.Memory = stats(cpu, ws)
	for i := 0; i+2 < len(ctrs); i += 3 {
		c := statsapi.ContainerStats{Name: ctrs[i].(string)}
		c.CPU, c.Memory = stats(ctrs[i+1].(float64), ctrs[i+2].(uint64))
		p.Containers = append(p.Containers, c)
	}
	return statsapi.Summary{Pods: []statsapi.PodStats{p}}
}

// The node guest's comparison (TestSystemdKubeletServeAgreesWithKubelet)
// passes equal figures and fails each way cgwarden could be wrong: a
// figure 10% off, the sandbox served as a container, a container left
// out, a pod missing, a figure unknown; and it refuses figures too small
// to prove anything. Host-only: no kubelet needed.
func TestDiffSummariesCatches(t *testing.T) {
	keys := []string{"default/p"}
	kubelet := summaryOf("p", 9, 20<<20, "burn", 6.5, uint64(16<<20))
	for _, tc := range []struct {
		name   string
		ours   statsapi.Summary
		theirs statsapi.Summary
		want   string // a problem must contain it; "" for none
	}{
		{"equal", kubelet, kubelet, ""},
		{"within 5%", summaryOf("p", 9.4, 20<<20, "burn", 6.7, uint64(16<<20)), kubelet, ""},
		{"pod CPU 10% off", summaryOf("p", 9.9, 20<<20, "burn", 6.5, uint64(16<<20)), kubelet, "pod default/p: cgwarden is more than 5% off"},
		{"container working set 10% off", summaryOf("p", 9, 20<<20, "burn", 6.5, uint64(18<<20)), kubelet, "container default/p/burn: cgwarden is more than 5% off"},
		{"the sandbox as a container", summaryOf("p", 9, 20<<20, "burn", 6.5, uint64(16<<20), "POD", 0.1, uint64(1<<20)), kubelet, "cgwarden's containers [POD burn]"},
		{"a container left out", summaryOf("p", 9, 20<<20), kubelet, "cgwarden's containers []"},
		{"a pod missing", statsapi.Summary{}, kubelet, "the kubelet serves pod default/p, cgwarden does not"},
		{"a pod the kubelet does not have", summaryOf("q", 9, 20<<20, "burn", 6.5, uint64(16<<20)), kubelet, "cgwarden serves pod default/q"},
		{"no burn", summaryOf("p", 0.01, 20<<20, "burn", 0.01, uint64(16<<20)), summaryOf("p", 0.01, 20<<20, "burn", 0.01, uint64(16<<20)), "would prove little"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ours, theirs := figuresOf(tc.ours), figuresOf(tc.theirs)
			_, problems := diffSummaries(keys, ours, theirs)
			wantProblem(t, "figures", tc.want, problems)
		})
	}
	// A figure the agent does not know is a problem, not a zero.
	ours := kubelet
	ours.Pods = append([]statsapi.PodStats(nil), kubelet.Pods...)
	ours.Pods[0].Memory = nil
	if _, problems := diffSummaries(keys, figuresOf(ours), figuresOf(kubelet)); !strings.Contains(strings.Join(problems, "\n"), "figures missing") {
		t.Errorf("an unknown working set passed: %v", problems)
	}
}

// resource is /metrics/resource for pod p of namespace default: its CPU
// and working set, and a CPU and working set per container (name, value,
// value), in the kubelet's exposition.
func resource(podCPU, podWS float64, ctrs ...any) []byte {
	var b strings.Builder
	b.WriteString("# TYPE container_cpu_usage_seconds_total counter\n")
	for i := 0; i+2 < len(ctrs); i += 3 {
		fmt.Fprintf(&b, "container_cpu_usage_seconds_total{container=%q,namespace=\"default\",pod=\"p\"} %g 1764673200000\n", ctrs[i], ctrs[i+1])
	}
	b.WriteString("# TYPE container_memory_working_set_bytes gauge\n")
	for i := 0; i+2 < len(ctrs); i += 3 {
		fmt.Fprintf(&b, "container_memory_working_set_bytes{container=%q,namespace=\"default\",pod=\"p\"} %g 1764673200000\n", ctrs[i], ctrs[i+2])
	}
	fmt.Fprintf(&b, "# TYPE pod_cpu_usage_seconds_total counter\npod_cpu_usage_seconds_total{namespace=\"default\",pod=\"p\"} %g 1764673200000\n", podCPU)
	fmt.Fprintf(&b, "# TYPE pod_memory_working_set_bytes gauge\npod_memory_working_set_bytes{namespace=\"default\",pod=\"p\"} %g 1764673200000\n", podWS)
	return []byte(b.String())
}

// The node guest's /metrics/resource comparison passes equal series and
// fails a value 10% off, the sandbox served as a container, and a
// container left out; another pod's series are not compared.
func TestDiffSeriesCatches(t *testing.T) {
	keys := []string{"default/p"}
	kubelet := resource(9, 20e6, "burn", 6.5, 16e6)
	for _, tc := range []struct {
		name string
		ours []byte
		want string
	}{
		{"equal", kubelet, ""},
		{"another pod's series", append(resource(9, 20e6, "burn", 6.5, 16e6), "container_cpu_usage_seconds_total{container=\"x\",namespace=\"default\",pod=\"q\"} 100\n"...), ""},
		{"container CPU 10% off", resource(9, 20e6, "burn", 7.2, 16e6), "container_cpu_usage_seconds_total{container=burn,namespace=default,pod=p}: cgwarden 7.2, the kubelet 6.5"},
		{"pod working set 10% off", resource(9, 22e6, "burn", 6.5, 16e6), "pod_memory_working_set_bytes{namespace=default,pod=p}: cgwarden 2.2e+07"},
		{"the sandbox as a container", resource(9, 20e6, "burn", 6.5, 16e6, "POD", 0.1, 1e6), "cgwarden serves container_cpu_usage_seconds_total{container=POD,"},
		{"a container left out", resource(9, 20e6), "the kubelet serves container_memory_working_set_bytes{container=burn,"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			theirs, err := resourceSeries(kubelet, keys)
			if err != nil {
				t.Fatal(err)
			}
			ours, err := resourceSeries(tc.ours, keys)
			if err != nil {
				t.Fatal(err)
			}
			_, problems := diffSeries(ours, theirs)
			wantProblem(t, "series", tc.want, problems)
		})
	}
}

// wantProblem: no problem when want is "", else one that says want.
func wantProblem(t *testing.T, what, want string, problems []string) {
	t.Helper()
	all := strings.Join(problems, "\n")
	switch {
	case want == "" && len(problems) > 0:
		t.Errorf("problems with agreeing %s:\n%s", what, all)
	case want != "" && !strings.Contains(all, want):
		t.Errorf("no problem saying %q; got:\n%s", want, all)
	}
}
