package serve_test

import (
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
			all := strings.Join(problems, "\n")
			switch {
			case tc.want == "" && len(problems) > 0:
				t.Errorf("problems with agreeing figures:\n%s", all)
			case tc.want != "" && !strings.Contains(all, tc.want):
				t.Errorf("no problem saying %q; got:\n%s", tc.want, all)
			}
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
