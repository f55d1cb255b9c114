package serve

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/stats"
)

// syntheticNode is a node of pods × containers with every figure known,
// the shape of a busy node after a scan.
func syntheticNode(pods, containers int, at time.Time) *inventory.Node {
	u := func(v uint64) *uint64 { return &v }
	i := func(v int64) *int64 { return &v }
	fill := func(c *inventory.Cgroup, k uint64) {
		c.Stats = stats.Stats{
			CPU:    stats.CPU{Weight: u(1024), UsageNs: u(k * 1e9), QuotaUs: i(stats.Unlimited), PeriodUs: u(100000)},
			Memory: stats.Memory{UsageBytes: u(k << 20), WorkingSetBytes: u(k << 19), RSSBytes: u(k << 18), LimitBytes: i(stats.Unlimited), PageFaults: u(k), MajorPageFaults: u(0)},
		}
		r := float64(k%7) / 10
		c.UsageCores = &r
	}
	root := &inventory.Cgroup{Path: "/", Identity: layout.Root()}
	fill(root, 1)
	kube := &inventory.Cgroup{Path: "/kubepods", Parent: root, Identity: layout.Identity{Kind: layout.KubeRoot, Driver: layout.Cgroupfs}}
	fill(kube, 2)
	root.Children = []*inventory.Cgroup{kube}
	n := &inventory.Node{Time: at, CPUs: 8, Root: root, KubeRoot: kube, Driver: layout.Cgroupfs}
	for p := 0; p < pods; p++ {
		uid := fmt.Sprintf("%08x-0000-4000-8000-%012x", p, p)
		pc := &inventory.Cgroup{Path: "/kubepods/pod" + uid, Parent: kube, Identity: layout.Identity{Kind: layout.Pod, PodUID: uid, QoS: layout.Guaranteed}}
		fill(pc, uint64(p+3))
		kube.Children = append(kube.Children, pc)
		ip := &inventory.Pod{UID: uid, QoS: layout.Guaranteed, Name: fmt.Sprintf("app-%d", p), Namespace: "default", Cgroup: pc}
		for c := 0; c < containers; c++ {
			id := fmt.Sprintf("%064x", p*containers+c)
			cc := &inventory.Cgroup{Path: pc.Path + "/" + id, Parent: pc, Identity: layout.Identity{Kind: layout.Container, PodUID: uid, ContainerID: id, Runtime: "containerd"}}
			fill(cc, uint64(c+1))
			pc.Children = append(pc.Children, cc)
			ip.Containers = append(ip.Containers, &inventory.Container{ID: id, Runtime: "containerd", Name: fmt.Sprintf("c%d", c), Cgroup: cc})
		}
		n.Pods = append(n.Pods, ip)
	}
	n.Cgroups = 2 + pods*(1+containers)
	return n
}

// What serve adds to each scan on a node of 250 pods × 4 containers:
// aggregation, the audit, and rendering both kubelet formats once. This
// is paid once per --interval, whatever the number of scrapers.
func BenchmarkPerScanWork(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	s := New(Config{NodeName: "bench", Findings: true})
	h := s.Handler()
	b.ReportAllocs()
	for b.Loop() {
		s.Feed(Scan{Node: syntheticNode(250, 4, now)})
		for _, p := range []string{"/metrics/resource", "/stats/summary"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
			if rec.Code != 200 {
				b.Fatal(p, rec.Code)
			}
		}
	}
}

// One scrape of /metrics/resource once the scan is rendered: the cost that
// grows with the number of scrapers.
func BenchmarkScrapeResource(b *testing.B) {
	s := New(Config{NodeName: "bench"})
	s.Feed(Scan{Node: syntheticNode(250, 4, time.Unix(1_800_000_000, 0))})
	h := s.Handler()
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics/resource", nil))
	}
}

func BenchmarkSyntheticNodeOnly(b *testing.B) {
	for b.Loop() {
		_ = syntheticNode(250, 4, time.Unix(1_800_000_000, 0))
	}
}

// The same without the audit, to tell its share.
func BenchmarkPerScanWorkNoAudit(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	s := New(Config{NodeName: "bench"})
	h := s.Handler()
	for b.Loop() {
		s.Feed(Scan{Node: syntheticNode(250, 4, now)})
		for _, p := range []string{"/metrics/resource", "/stats/summary"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		}
	}
}
