package serve

import (
	"encoding/json"
	"math"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/cgwarden/cgwarden/internal/aggregate"
)

// summary builds the kubelet Summary of a state: node, then pods with
// their containers (sandboxes are not containers, as in the kubelet).
// Figures cgwarden does not know are left out, never written as 0.
func (st *state) buildSummary() *statsapi.Summary {
	at := metav1.NewTime(st.time)
	sum := &statsapi.Summary{
		Node: statsapi.NodeStats{
			NodeName: st.nodeName,
			CPU:      cpuStats(at, st.nodeUsage),
			Memory:   memoryStats(at, st.nodeUsage),
		},
		Pods: make([]statsapi.PodStats, 0, len(st.pods)),
	}
	for i := range st.pods {
		p := &st.pods[i]
		ps := statsapi.PodStats{
			PodRef:     statsapi.PodReference{Name: podName(p), Namespace: p.Namespace, UID: p.UID},
			StartTime:  metav1.NewTime(st.podStart(p)),
			Containers: make([]statsapi.ContainerStats, 0, len(p.Containers)),
			CPU:        cpuStats(at, p.Usage),
			Memory:     memoryStats(at, p.Usage),
		}
		for j := range p.Containers {
			c := &p.Containers[j]
			cs := statsapi.ContainerStats{
				Name:   containerName(c),
				CPU:    cpuStats(at, c.Usage),
				Memory: memoryStats(at, c.Usage),
			}
			if t := st.containerStart(p, c); !t.IsZero() {
				cs.StartTime = metav1.NewTime(t)
			}
			ps.Containers = append(ps.Containers, cs)
		}
		sum.Pods = append(sum.Pods, ps)
	}
	return sum
}

func cpuStats(at metav1.Time, u aggregate.Usage) *statsapi.CPUStats {
	if u.CPUUsageNs == nil && u.CPUCores == nil {
		return nil
	}
	c := &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: u.CPUUsageNs}
	if u.CPUCores != nil {
		nc := uint64(math.Round(*u.CPUCores * 1e9))
		c.UsageNanoCores = &nc
	}
	return c
}

func memoryStats(at metav1.Time, u aggregate.Usage) *statsapi.MemoryStats {
	if u.MemoryUsageBytes == nil && u.WorkingSetBytes == nil && u.RSSBytes == nil {
		return nil
	}
	return &statsapi.MemoryStats{
		Time:            at,
		AvailableBytes:  u.AvailableBytes(),
		UsageBytes:      u.MemoryUsageBytes,
		WorkingSetBytes: u.WorkingSetBytes,
		RSSBytes:        u.RSSBytes,
		PageFaults:      u.PageFaults,
		MajorPageFaults: u.MajorPageFaults,
	}
}

func (st *state) renderSummary() ([]byte, error) {
	b, err := json.MarshalIndent(st.buildSummary(), "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
