package scale

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// watchEvents are the watch events the API server sent for one resource
// between two scrapes, and their bytes; bookmarks (a few hundred bytes:
// an object with only a resourceVersion, sent to every watcher about once
// a minute) are left out by their size: every object here is over 1 KiB.
type watchEvents struct{ events, bookmarks, bytes float64 }

func eventsBetween(before, after scrape, group, res string) watchEvents {
	sel := map[string]string{"group": group, "resource": res}
	h := after.histogram("apiserver_watch_events_sizes", sel).minus(before.histogram("apiserver_watch_events_sizes", sel))
	small := h.count - h.above(1024)
	return watchEvents{events: h.count - small, bookmarks: small, bytes: h.sum}
}

// watches is how many WATCH requests the API server holds open for a
// resource (apiserver_longrunning_requests).
func watches(s scrape, group, res string) float64 {
	return s.sum("apiserver_longrunning_requests", map[string]string{"verb": "WATCH", "group": group, "resource": res}, nil)
}

// quiet waits until the API server has sent no VM or pod watch event for
// two seconds, and returns its metrics then.
func (e *env) quiet(t *testing.T) scrape {
	t.Helper()
	ctx := context.Background()
	var last scrape
	var lastN float64
	still := 0
	poll.Until(t, 2*time.Minute, "the API server's watch events quiet", func() (bool, string, error) {
		m, err := e.apiMetrics(ctx)
		if err != nil {
			return false, "", err
		}
		n := m.sum("apiserver_watch_events_total", map[string]string{"resource": "virtualmachines"}, nil) +
			m.sum("apiserver_watch_events_total", map[string]string{"resource": "pods"}, nil)
		if last != nil && n == lastN {
			still++
		} else {
			still = 0
		}
		last, lastN = m, n
		return still >= 2, fmt.Sprintf("%.0f VM and pod watch events, unchanged over %d reads", n, still), nil
	})
	return last
}

// waitRequests waits until every runner pod of vms requests its VM's
// wanted size (the sizer resized it), up to timeout; it returns how long
// that took.
func (e *env) waitRequests(t *testing.T, ns string, want map[string]int64, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	poll.Every(500*time.Millisecond).Until(t, timeout, fmt.Sprintf("%d runner pods resized by the sizer", len(want)), func() (bool, string, error) {
		list, err := e.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "vm.neon.tech/name"})
		if err != nil {
			return false, err.Error(), nil
		}
		off := 0
		var example string
		for _, p := range list.Items {
			w, ok := want[p.Labels["vm.neon.tech/name"]]
			if !ok {
				continue
			}
			got := p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
			if got.MilliValue() != w {
				off++
				example = fmt.Sprintf("%s requests %s, want %dm", p.Name, got.String(), w)
			}
		}
		return off == 0, fmt.Sprintf("%d not yet (%s)", off, example), nil
	})
	return time.Since(start)
}

// TestWatchEventsPerVMChange: each VM size change is delivered as watch
// events to the sizer and to the agent of the VM's node, and to no other
// agent: events per change stay flat as agents are added (issue 22: ≤ 2,
// flat in N; a cluster-wide VM informer in each agent makes it N + 1).
//
// Nodes, one VM with its runner pod on each; the sizer; then for each N,
// N agents (on nodes 0..N-1) and a series of use changes of their VMs.
func TestWatchEventsPerVMChange(t *testing.T) {
	e := lane(t)
	e.setup(t)
	counts := sizes(t, "CGWARDEN_SCALE_AGENTS", 10, 20, 40)
	slices.Sort(counts)
	maxN := counts[len(counts)-1]
	changes := envInt(t, "CGWARDEN_SCALE_CHANGES", 60)
	ns := e.testNamespace(t, "events")
	e.makeNodes(t, maxN)
	vms := make([]vm, maxN)
	nodes := make([]string, maxN)
	for i := range vms {
		nodes[i] = nodeName(i)
		vms[i] = vm{ns: ns, name: fmt.Sprintf("vm-%05d", i), node: nodes[i], milli: 1000}
	}
	e.makeVMs(t, vms, true)
	e.startSizer(t, 50)
	use := map[string]int64{}
	for _, v := range vms {
		use[v.name] = v.milli
	}
	ctx := context.Background()
	var xs, ys []float64
	for _, n := range counts {
		f := e.startFleet(t, nodes[:n])
		before := e.quiet(t)
		t0 := time.Now()
		// A change every 25 ms (40 a second), round robin over the
		// agents' VMs: each VM's use goes up by 250m.
		for c := range changes {
			v := vms[c%n]
			use[v.name] += 250
			if use[v.name] > 8000 {
				use[v.name] = 500
			}
			if err := e.setUse(ctx, v, use[v.name]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(25 * time.Millisecond)
		}
		want := map[string]int64{}
		for _, v := range vms[:min(n, changes)] {
			want[v.name] = use[v.name]
		}
		e.waitRequests(t, ns, want, 2*time.Minute)
		after := e.quiet(t)
		took := time.Since(t0)
		vmEv := eventsBetween(before, after, "vm.neon.tech", "virtualmachines")
		podEv := eventsBetween(before, after, "", "pods")
		reqs := delta(after.requests(nil), before.requests(nil))
		per := vmEv.events / float64(changes)
		xs, ys = append(xs, float64(n)), append(ys, per)
		record(t, "watch-events-per-vm-change", map[string]any{
			"agents": n, "vms": maxN, "changes": changes, "seconds": took.Seconds(),
			"vmEventsPerChange": per, "vmEventBytesPerChange": vmEv.bytes / float64(changes),
			"podEventsPerChange": podEv.events / float64(changes), "bookmarks": vmEv.bookmarks + podEv.bookmarks,
			"resizePatches": reqs["PATCH pods/resize"],
			"vmWatches":     watches(after, "vm.neon.tech", "virtualmachines"), "podWatches": watches(after, "", "pods"),
			"agentRequests": describe(f.reqs.snapshot()),
		})
		f.stop()
	}
	a, b := fit(xs, ys)
	record(t, "watch-events-per-vm-change-fit", map[string]any{"intercept": a, "perAgent": b, "agents": xs, "eventsPerChange": ys})
	for i := range xs {
		if ys[i] > 2.2 {
			t.Errorf("%v agents: %.2f watch events per VM change; want at most 2 (the sizer and the VM's own node's agent)", xs[i], ys[i])
		}
	}
	if b > 0.02 {
		t.Errorf("watch events per VM change grow by %.3f per agent (fit over %v agents: %.2f): each change reaches agents of other nodes", b, xs, ys)
	}
}

// TestAgentHeapFlatInVMs: an agent's heap does not grow with the VMs of
// other nodes (issue 22: flat in V within 1 MiB; an agent holding every
// VM of the cluster grows by each).
//
// K agents on nodes that run two VMs each; for each V, the cluster's VMs
// are raised to V (the others without pods, on no agent's node), the
// agents start, and their heap is the live heap of this process with them
// running minus without, over K (runtime/metrics /gc/heap/live:bytes after
// forced collections).
func TestAgentHeapFlatInVMs(t *testing.T) {
	e := lane(t)
	e.setup(t)
	totals := sizes(t, "CGWARDEN_SCALE_VMS", 250, 500, 1000)
	slices.Sort(totals)
	k := envInt(t, "CGWARDEN_SCALE_HEAP_AGENTS", 4)
	const own = 2
	ns := e.testNamespace(t, "heap")
	e.makeNodes(t, k)
	var mine []vm
	nodes := make([]string, k)
	for i := range k {
		nodes[i] = nodeName(i)
		for j := range own {
			mine = append(mine, vm{ns: ns, name: fmt.Sprintf("own-%03d-%d", i, j), node: nodes[i], milli: 2000})
		}
	}
	e.makeVMs(t, mine, true)
	made := len(mine)
	var xs, ys []float64
	for _, v := range totals {
		if v > made {
			var others []vm
			for i := made; i < v; i++ {
				others = append(others, vm{ns: ns, name: fmt.Sprintf("vm-%06d", i), node: fmt.Sprintf("elsewhere-%05d", i/10), milli: 1000})
			}
			e.makeVMs(t, others, false)
			made = v
		}
		h0 := liveHeap()
		f := e.startFleet(t, nodes)
		// Each VM's watch delivers it after the agent's first pods.
		poll.Every(250*time.Millisecond).Until(t, time.Minute, fmt.Sprintf("every agent's %d pods sized from their VM objects", own), func() (bool, string, error) {
			for _, a := range f.agents {
				set, err := a.meta.Sizes.Sizes(context.Background())
				if err != nil {
					return false, "", err
				}
				sized := 0
				for _, p := range set.Pods() {
					if p.Namespace != ns {
						continue // another test's, on the same node
					}
					if o, ok := set.Origin(p.UID); ok && o.Source == "neonvm" && strings.HasPrefix(o.Via, "VM object") {
						sized++
					}
				}
				if sized != own {
					return false, fmt.Sprintf("agent of %s: %d", a.node, sized), nil
				}
			}
			return true, "", nil
		})
		h1 := liveHeap()
		per := (float64(h1) - float64(h0)) / float64(k)
		xs, ys = append(xs, float64(made)), append(ys, per)
		record(t, "agent-heap", map[string]any{"vms": made, "agents": k, "heapBytesPerAgent": per, "processLiveBefore": h0, "processLiveWith": h1})
		f.stop()
		// Let the stopped agents' connections and goroutines finish
		// closing before the next baseline.
		time.Sleep(3 * time.Second)
	}
	a, b := fit(xs, ys)
	record(t, "agent-heap-fit", map[string]any{"interceptBytes": a, "bytesPerVM": b, "vms": xs, "heapBytesPerAgent": ys})
	if spread := ys[len(ys)-1] - ys[0]; spread > 1<<20 {
		t.Errorf("an agent's heap grew by %.1f MiB from %v to %v VMs in the cluster (%.0f bytes per VM); want flat within 1 MiB",
			spread/(1<<20), xs[0], xs[len(xs)-1], b)
	}
}

// TestSizerDrainsBurst: the real sizer under a burst of VM size changes
// brings every runner pod to its VM's final size within (changes / QPS +
// 30) s, with one PATCH per resize (issue 22); then at a steady rate of
// changes it keeps up, and its change→patch latency is reported (target
// p99 ≤ 2 s at 50 changes/s).
func TestSizerDrainsBurst(t *testing.T) {
	e := lane(t)
	e.setup(t)
	nVMs := envInt(t, "CGWARDEN_SCALE_BURST_VMS", 300)
	nChanges := envInt(t, "CGWARDEN_SCALE_BURST_CHANGES", 2*nVMs)
	rate := envInt(t, "CGWARDEN_SCALE_STEADY_RATE", 50)
	steady := envDuration(t, "CGWARDEN_SCALE_STEADY", 15*time.Second)
	const qps = 100 // the sizer's default --kube-api-qps
	ns := e.testNamespace(t, "sizer")
	nodes := max(1, nVMs/100)
	e.makeNodes(t, nodes)
	vms := make([]vm, nVMs)
	for i := range vms {
		vms[i] = vm{ns: ns, name: fmt.Sprintf("vm-%05d", i), node: nodeName(i % nodes), milli: 1000}
	}
	e.makeVMs(t, vms, true)
	s := e.startSizer(t, qps)
	ctx := context.Background()
	// The controller is up once it resizes a first pod.
	if err := e.setUse(ctx, vms[0], 1250); err != nil {
		t.Fatal(err)
	}
	e.waitRequests(t, ns, map[string]int64{vms[0].name: 1250}, 2*time.Minute)
	vms[0].milli = 1250

	// The burst: each VM changed nChanges/nVMs times in a row, as fast as
	// the test's client goes.
	before := e.quiet(t)
	sBefore := s.metrics(t)
	per := max(1, nChanges/nVMs)
	final := map[string]int64{}
	t0 := time.Now()
	if err := bulk(nVMs, 32, func(i int) error {
		v := vms[i]
		for c := 1; c <= per; c++ {
			if err := e.setUse(ctx, v, v.milli+int64(250*c)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	issued := time.Since(t0)
	for i := range vms {
		vms[i].milli += int64(250 * per)
		final[vms[i].name] = vms[i].milli
	}
	bound := time.Duration(float64(nVMs*per)/qps*float64(time.Second)) + 30*time.Second
	drained := e.waitRequests(t, ns, final, bound) + issued
	after := e.quiet(t)
	sAfter := s.metrics(t)
	reqs := delta(after.requests(nil), before.requests(nil))
	patches := reqs["PATCH pods/resize"]
	resized := sAfter.sum("cgwarden_sizer_resizes_total", map[string]string{"result": "resized"}, nil) -
		sBefore.sum("cgwarden_sizer_resizes_total", map[string]string{"result": "resized"}, nil)
	lat := sAfter.histogram("cgwarden_sizer_resize_latency_seconds", nil).minus(sBefore.histogram("cgwarden_sizer_resize_latency_seconds", nil))
	record(t, "sizer-burst", map[string]any{"vms": nVMs, "changes": nVMs * per, "qps": qps, "issueSeconds": issued.Seconds(),
		"drainSeconds": drained.Seconds(), "boundSeconds": bound.Seconds(), "resizePatches": patches, "resized": resized,
		"p50": lat.quantile(0.5), "p99": lat.quantile(0.99), "requests": describe(reqs)})
	if patches > float64(nVMs*per) || patches < float64(nVMs) {
		t.Errorf("%.0f resize PATCHes for %d VMs changed %d times each; want one per resize: at least %d, at most %d", patches, nVMs, per, nVMs, nVMs*per)
	}
	if patches != resized {
		t.Errorf("%.0f resize PATCHes at the API server, the sizer counts %.0f resizes: a resize is one PATCH", patches, resized)
	}

	// Steady: rate changes a second for the steady duration, round robin
	// over the VMs.
	sBefore = s.metrics(t)
	n := int(steady.Seconds() * float64(rate))
	tick := time.NewTicker(time.Second / time.Duration(rate))
	final = map[string]int64{}
	// Patches go out on 16 workers, each VM always on the same one, so
	// that a VM's changes reach the API server in their order.
	work := make([]chan vm, 16)
	var wg sync.WaitGroup
	for i := range work {
		work[i] = make(chan vm, 64)
		wg.Go(func() {
			for v := range work[i] {
				if err := e.setUse(ctx, v, v.milli); err != nil {
					t.Error(err)
				}
			}
		})
	}
	t0 = time.Now()
	for c := range n {
		<-tick.C
		i := c % nVMs
		v := &vms[i]
		v.milli += 250
		if v.milli > 8000 {
			v.milli = 500
		}
		final[v.name] = v.milli
		work[i%len(work)] <- *v
	}
	tick.Stop()
	for _, w := range work {
		close(w)
	}
	wg.Wait()
	sent := time.Since(t0)
	// A bound for a loaded CI machine (p99 was 29 s at load 15–50 here);
	// the latency itself is recorded, not asserted (docs/scale.md).
	caught := e.waitRequests(t, ns, final, 180*time.Second)
	sAfter = s.metrics(t)
	lat = sAfter.histogram("cgwarden_sizer_resize_latency_seconds", nil).minus(sBefore.histogram("cgwarden_sizer_resize_latency_seconds", nil))
	record(t, "sizer-steady", map[string]any{"changesPerSecond": float64(n) / sent.Seconds(), "changes": n, "vms": nVMs, "qps": qps,
		"resizes": lat.count, "p50": lat.quantile(0.5), "p90": lat.quantile(0.9), "p99": lat.quantile(0.99),
		"meanSeconds": lat.sum / lat.count, "caughtUpSecondsAfterLast": caught.Seconds()})
	if math.IsNaN(lat.quantile(0.99)) {
		t.Error("no change→patch latency observed at the steady rate")
	}
}

// agentResources are the resources an agent asks the API server about:
// its pods, the VM objects they reference, the size-trust watches
// (policy, binding, Node), Events, and the reviews of --authenticate.
var agentResources = map[string]bool{
	"pods": true, "virtualmachines": true, "virtualmachineinstances": true, "nodes": true,
	"validatingadmissionpolicies": true, "validatingadmissionpolicybindings": true, "events": true,
	"tokenreviews": true, "subjectaccessreviews": true,
}

// beyondWatches keeps of apiserver_request_total the requests of an
// agent's resources that are not WATCH (a watch's renewal every 5–10
// minutes is the watch itself).
func beyondWatches(verb, res string) bool {
	base, _, _ := strings.Cut(res, "/")
	return verb != "WATCH" && agentResources[base]
}

// TestIdleAgentRequests: idle agents ask the API server nothing beyond
// their watches — no discovery, relists, size-trust checks or Events on a
// timer (issue 22: at most one request per agent per 10 minutes).
//
// One VM with its runner pod per node; a fleet grown to each N
// (CGWARDEN_SCALE_IDLE_AGENTS, 10, 20, 40 in the lane); once the start's
// requests are over, a window (CGWARDEN_SCALE_IDLE, 45 s) in which nothing
// changes. Counted over it: apiserver_request_total of the agents'
// resources without WATCH, and the agents' own count of their requests
// (discovery included: the API server does not count it). The law: the
// requests in the window grow with N by at most window / 10 minutes per
// agent (fitted slope; what is not the agents' is the intercept). A
// window shows only what comes more often than it: the benchmark runs it
// at 11 minutes, past the period of anything polled every 10.
//
// Also: every agent's size trust comes from its watches on a real API
// server under the size-trust role: its Node's 64 CPUs, and the policy
// found absent (not refused: RBAC's resourceNames narrows a list with the
// field selector metadata.name).
func TestIdleAgentRequests(t *testing.T) {
	e := lane(t)
	e.setup(t)
	counts := sizes(t, "CGWARDEN_SCALE_IDLE_AGENTS", 10, 20, 40)
	slices.Sort(counts)
	window := envDuration(t, "CGWARDEN_SCALE_IDLE", 45*time.Second)
	maxN := counts[len(counts)-1]
	ns := e.testNamespace(t, "idle")
	e.makeNodes(t, maxN)
	vms := make([]vm, maxN)
	nodes := make([]string, maxN)
	for i := range vms {
		nodes[i] = nodeName(i)
		vms[i] = vm{ns: ns, name: fmt.Sprintf("vm-%05d", i), node: nodes[i], milli: 1000}
	}
	e.makeVMs(t, vms, true)
	ctx := context.Background()
	var fleets []*fleet
	clientCount := func() map[string]float64 {
		out := map[string]float64{}
		for _, f := range fleets {
			for k, v := range f.reqs.snapshot() {
				out[k] += v
			}
		}
		return out
	}
	notWatch := func(m map[string]float64) (n float64) {
		for k, v := range m {
			if !strings.HasPrefix(k, "WATCH ") {
				n += v
			}
		}
		return n
	}
	limit := window.Minutes() / 10 // requests per agent in the window
	var xs, server, client []float64
	started := 0
	for _, n := range counts {
		if n > started {
			fleets = append(fleets, e.startFleet(t, nodes[started:n]))
			started = n
		}
		for _, f := range fleets {
			for _, a := range f.agents {
				tr := a.meta.Sizes.Trust()
				if tr.AllocatableMilliCPU != 64000 || !strings.Contains(tr.Untrusted, "is not installed") {
					t.Fatalf("agent of %s: size trust %+v; want its Node's 64 CPUs and the policy seen absent", a.node, tr)
				}
			}
		}
		// The start's lists are over when the agents have asked nothing
		// but watches for 5 s.
		var last float64
		still := time.Now()
		poll.Every(500*time.Millisecond).Until(t, time.Minute, fmt.Sprintf("%d agents' start over", n), func() (bool, string, error) {
			if c := notWatch(clientCount()); c != last {
				last, still = c, time.Now()
			}
			return time.Since(still) >= 5*time.Second, fmt.Sprintf("%.0f requests", last), nil
		})
		a0, err := e.apiMetrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c0 := clientCount()
		time.Sleep(window)
		a1, err := e.apiMetrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c1 := clientCount()
		got := delta(a1.requests(beyondWatches), a0.requests(beyondWatches))
		mine := delta(c1, c0)
		xs, server, client = append(xs, float64(n)), append(server, total(got)), append(client, notWatch(mine))
		per10 := func(r float64) float64 { return r / float64(n) / window.Minutes() * 10 }
		record(t, "idle-agent-requests", map[string]any{"agents": n, "windowSeconds": window.Seconds(),
			"apiserverBeyondWatches": total(got), "apiserverPerAgentPer10Min": per10(total(got)),
			"clientBeyondWatches": notWatch(mine), "clientPerAgentPer10Min": per10(notWatch(mine)),
			"apiserver": describe(got), "client": describe(mine),
			"allResources": describe(delta(a1.requests(func(v, _ string) bool { return v != "WATCH" }), a0.requests(func(v, _ string) bool { return v != "WATCH" }))),
		})
	}
	as, bs := fit(xs, server)
	ac, bc := fit(xs, client)
	record(t, "idle-agent-requests-fit", map[string]any{"windowSeconds": window.Seconds(), "agents": xs,
		"apiserver": server, "apiserverIntercept": as, "apiserverPerAgent": bs, "apiserverPerAgentPer10Min": bs / window.Minutes() * 10,
		"client": client, "clientIntercept": ac, "clientPerAgent": bc, "clientPerAgentPer10Min": bc / window.Minutes() * 10})
	for _, c := range []struct {
		what  string
		slope float64
		ys    []float64
	}{{"apiserver_request_total", bs, server}, {"the agents' own count", bc, client}} {
		if c.slope > limit {
			t.Errorf("%s: idle requests beyond watches grow by %.3f per agent in %v (%.2f per agent per 10 minutes; at %v agents: %v); want at most 1 per agent per 10 minutes",
				c.what, c.slope, window, c.slope/window.Minutes()*10, xs, c.ys)
		}
	}
}
