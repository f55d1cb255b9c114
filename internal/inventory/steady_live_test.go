package inventory_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/stats"
)

// flatCgroup is what a scan says of one cgroup, pointers followed.
type flatCgroup struct {
	Path       string
	Identity   layout.Identity
	Stats      stats.Stats
	Guaranteed float64
	Children   int
}

type flatPod struct {
	UID, QoS   string
	Cgroup     string
	Containers []string
}

type flatNode struct {
	Cgroups    []flatCgroup
	Pods       []flatPod
	Unattached []string
	Errors     []string
	Count      int
	KubeRoot   string
}

// flatten is everything of a Node a scan reads from the tree (not its
// time, nor /proc/meminfo, which changes between any two reads).
func flatten(n *inventory.Node) flatNode {
	var f flatNode
	n.Root.Walk(func(c *inventory.Cgroup) {
		f.Cgroups = append(f.Cgroups, flatCgroup{c.Path, c.Identity, stillMemory(c.Stats), c.GuaranteedCores, len(c.Children)})
	})
	for _, p := range n.Pods {
		fp := flatPod{UID: p.UID, QoS: p.QoS}
		if p.Cgroup != nil {
			fp.Cgroup = p.Cgroup.Path
		}
		for _, c := range p.Containers {
			fp.Containers = append(fp.Containers, fmt.Sprintf("%s %s misplaced=%v leftover=%v sandbox=%v", c.ID, c.Cgroup.Path, c.Misplaced, c.Leftover, c.Sandbox))
		}
		f.Pods = append(f.Pods, fp)
	}
	for _, c := range n.Unattached {
		f.Unattached = append(f.Unattached, c.Path)
	}
	for _, e := range n.Errors {
		f.Errors = append(f.Errors, e.Error())
	}
	f.Count = n.Cgroups
	if n.KubeRoot != nil {
		f.KubeRoot = n.KubeRoot.Path
	}
	return f
}

// stillMemory replaces the counters of s that move in an empty cgroup
// (known or not is kept) by 1: the kernel charges and uncharges its own
// memory (the kernfs nodes of new cgroups, per-CPU caches it flushes) to
// empty cgroups at any moment, and a CPU quota's period timer counts
// periods with nothing running, so two reads of these files a
// millisecond apart differ. TestSteadyCountersAreFresh checks counters.
func stillMemory(s stats.Stats) stats.Stats {
	one := uint64(1)
	for _, p := range []**uint64{&s.Memory.UsageBytes, &s.Memory.WorkingSetBytes, &s.Memory.RSSBytes, &s.Memory.InactiveFileBytes, &s.Memory.PageFaults, &s.Memory.MajorPageFaults,
		&s.CPU.Periods, &s.CPU.Throttled, &s.CPU.ThrottledNs} {
		if *p != nil {
			*p = &one
		}
	}
	return s
}

// diffFlat names the first difference between two flattened scans.
func diffFlat(a, b flatNode) string {
	if len(a.Cgroups) != len(b.Cgroups) {
		var pa, pb []string
		for _, c := range a.Cgroups {
			pa = append(pa, c.Path)
		}
		for _, c := range b.Cgroups {
			pb = append(pb, c.Path)
		}
		return fmt.Sprintf("%d cgroups against %d:\n%s\n--\n%s", len(a.Cgroups), len(b.Cgroups), strings.Join(pa, "\n"), strings.Join(pb, "\n"))
	}
	for i := range a.Cgroups {
		if !reflect.DeepEqual(a.Cgroups[i], b.Cgroups[i]) {
			return fmt.Sprintf("cgroup %s:\n%+v\n%+v", a.Cgroups[i].Path, dump(a.Cgroups[i]), dump(b.Cgroups[i]))
		}
	}
	if !reflect.DeepEqual(a.Pods, b.Pods) {
		return fmt.Sprintf("pods:\n%+v\n%+v", a.Pods, b.Pods)
	}
	if !reflect.DeepEqual(a, b) {
		return fmt.Sprintf("node:\n%+v\n%+v", a, b)
	}
	return ""
}

func dump(c flatCgroup) string {
	s := c.Stats
	v := func(p *uint64) string {
		if p == nil {
			return "nil"
		}
		return fmt.Sprint(*p)
	}
	i := func(p *int64) string {
		if p == nil {
			return "nil"
		}
		return fmt.Sprint(*p)
	}
	js, _ := json.Marshal(s)
	return fmt.Sprintf("weight=%s quota=%s period=%s limit=%s pidsmax=%s usage=%s mem=%s gone=%v guaranteed=%g children=%d id=%+v stats=%s",
		v(s.CPU.Weight), i(s.CPU.QuotaUs), v(s.CPU.PeriodUs), i(s.Memory.LimitBytes), i(s.Pids.Max), v(s.CPU.UsageNs), v(s.Memory.UsageBytes), s.Gone, c.Guaranteed, c.Children, c.Identity, js)
}

// TestSteadyScanEqualsFullScan changes a kubelet-shaped scratch tree at
// random between scans (pods and containers made and removed, some removed
// and made again under the same name, weights, quotas and limits written)
// and checks after every change that a steady-state scan, which reads
// listings and settings only when an event says they changed, gives the
// same node as a full scan of the same tree. Nothing runs in the tree, so
// its counters hold still between the two scans.
// Both scan as the one-shot commands do (every process list) and as the
// agent does (ProcsWhereUsed).
func TestSteadyScanEqualsFullScan(t *testing.T) {
	for _, used := range []bool{false, true} {
		t.Run(fmt.Sprintf("ProcsWhereUsed=%v", used), func(t *testing.T) { steadyEqualsFull(t, used) })
	}
}

func steadyEqualsFull(t *testing.T, procsWhereUsed bool) {
	s := realtest.NewScratch(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	tree := newRandomTree(t, s, rng)
	steady, err := inventory.Open(s.Host)
	if err != nil {
		t.Fatal(err)
	}
	steady.Base, steady.ProcsWhereUsed = s.Name, procsWhereUsed
	st, err := inventory.NewSteady(steady, s.Host, inventory.SteadyOptions{Every: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	full, err := inventory.Open(s.Host)
	if err != nil {
		t.Fatal(err)
	}
	full.Base, full.ProcsWhereUsed = s.Name, procsWhereUsed

	const rounds = 40
	for round := range rounds {
		var did []string
		for range 1 + rng.IntN(4) {
			did = append(did, tree.change())
		}
		a, err := steady.Scan(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		b, err := full.Scan(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if d := diffFlat(flatten(a), flatten(b)); d != "" {
			t.Fatalf("round %d, after %v: steady scan differs from full scan: %s", round, did, d)
		}
	}
	c := st.Counts()
	t.Logf("%d rounds: %d listings kept, %d done; %d settings kept, %d read; %d events; %d cgroups forgotten; %s; %d watches",
		rounds, c.ListingsKept, c.Listings, c.SettingsKept, c.SettingsReads, c.Events, c.Forgotten, c.Kept, c.Watches)
	// The comparison above must have compared something kept: a steady
	// scan that reads everything every time would pass it trivially.
	if c.ListingsKept == 0 || c.SettingsKept == 0 || c.Events == 0 {
		t.Fatalf("the steady scans kept nothing (%+v): the comparison proved nothing", c)
	}
	if c.Forgotten == 0 {
		t.Fatalf("no removed cgroup was forgotten (%+v)", c)
	}
	// Every descriptor kept belongs to a cgroup that still exists.
	live := map[string]bool{}
	last, _ := full.Scan(time.Now())
	last.Root.Walk(func(c *inventory.Cgroup) { live[c.Path] = true })
	if want := tree.counterFiles(len(live)); c.Kept.Open > want {
		t.Fatalf("%d descriptors kept open for %d cgroups (at most %d expected): descriptors of removed cgroups leak", c.Kept.Open, len(live), want)
	}
}

// randomTree is a kubelet tree (systemd driver names) in a scratch cgroup
// that changes at random.
type randomTree struct {
	t    *testing.T
	s    *realtest.Scratch
	rng  *rand.Rand
	pods []string // relative paths of pod cgroups
	ctrs []string // relative paths of container cgroups
	n    int
}

func newRandomTree(t *testing.T, s *realtest.Scratch, rng *rand.Rand) *randomTree {
	r := &randomTree{t: t, s: s, rng: rng}
	s.Mkdir("kubepods.slice")
	s.Mkdir("kubepods.slice/kubepods-besteffort.slice")
	s.Mkdir("kubepods.slice/kubepods-burstable.slice")
	for range 4 {
		r.addPod()
	}
	return r
}

func (r *randomTree) uid() string {
	r.n++
	return fmt.Sprintf("%08x_1111_4222_8333_%012x", r.n, r.rng.Uint64()&0xffffffffffff)
}

func (r *randomTree) addPod() string {
	tier := []string{"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod", "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod", "kubepods.slice/kubepods-pod"}[r.rng.IntN(3)]
	p := tier + r.uid() + ".slice"
	r.s.Mkdir(p)
	r.pods = append(r.pods, p)
	r.addContainer(p)
	return "pod " + path.Base(p)
}

func (r *randomTree) addContainer(pod string) string {
	c := fmt.Sprintf("%s/cri-containerd-%064x.scope", pod, r.rng.Uint64())
	r.s.Mkdir(c)
	r.ctrs = append(r.ctrs, c)
	return "container " + path.Base(c)
}

// rmdir removes a cgroup made by the tree in every hierarchy.
func (r *randomTree) rmdir(rel string) {
	for _, p := range r.s.Points {
		if err := r.s.Host.Rmdir(path.Join(p, r.s.Name, rel)); err != nil {
			r.t.Fatalf("rmdir: %v", err)
		}
	}
}

// mkdirAgain makes a removed cgroup again (the scratch still removes it at
// cleanup, having made it first).
func (r *randomTree) mkdirAgain(rel string) {
	if r.s.V2() {
		r.s.Write(path.Dir(rel), "cgroup.subtree_control", "+cpu +memory +pids")
	}
	for _, p := range r.s.Points {
		if err := r.s.Host.Mkdir(path.Join(p, r.s.Name, rel)); err != nil {
			r.t.Fatalf("mkdir: %v", err)
		}
	}
}

// change makes one random change and says what it was.
func (r *randomTree) change() string {
	all := append(append([]string{}, r.pods...), r.ctrs...)
	pick := all[r.rng.IntN(len(all))]
	switch op := r.rng.IntN(9); {
	case op == 0:
		return r.addPod()
	case op == 1 && len(r.pods) > 0:
		return r.addContainer(r.pods[r.rng.IntN(len(r.pods))])
	case op == 2 && len(r.ctrs) > 1:
		i := r.rng.IntN(len(r.ctrs))
		c := r.ctrs[i]
		r.rmdir(c)
		r.ctrs = slices.Delete(r.ctrs, i, i+1)
		return "removed " + path.Base(c)
	case op == 3 && len(r.ctrs) > 0:
		c := r.ctrs[r.rng.IntN(len(r.ctrs))]
		r.rmdir(c)
		r.mkdirAgain(c)
		return "removed and made again " + path.Base(c)
	case op == 4:
		w := 2 + r.rng.IntN(4000)
		if r.s.V2() {
			r.s.Write(pick, "cpu.weight", fmt.Sprint(1+w%10000))
		} else {
			r.s.Write(pick, "cpu.shares", fmt.Sprint(w))
		}
		return "weight of " + path.Base(pick)
	case op == 5 && len(r.pods) > 0:
		// Only pods: v1 refuses a child quota above its parent's.
		pick = r.pods[r.rng.IntN(len(r.pods))]
		q := 1000 + r.rng.IntN(100000)
		if r.s.V2() {
			r.s.Write(pick, "cpu.max", fmt.Sprintf("%d 100000", q))
		} else {
			r.s.Write(pick, "cpu.cfs_quota_us", fmt.Sprint(q))
		}
		return "quota of " + path.Base(pick)
	case op == 6:
		m := (64 + r.rng.IntN(4096)) << 20
		if r.s.V2() {
			r.s.Write(pick, "memory.max", fmt.Sprint(m))
		} else {
			r.s.Write(pick, "memory.limit_in_bytes", fmt.Sprint(m))
		}
		return "memory limit of " + path.Base(pick)
	case op == 7:
		r.s.Write(pick, "pids.max", fmt.Sprint(10+r.rng.IntN(1000)))
		return "pids.max of " + path.Base(pick)
	case op == 8 && len(r.pods) > 1:
		i := r.rng.IntN(len(r.pods))
		p := r.pods[i]
		r.ctrs = slices.DeleteFunc(r.ctrs, func(c string) bool {
			if strings.HasPrefix(c, p+"/") {
				r.rmdir(c)
				return true
			}
			return false
		})
		r.rmdir(p)
		r.pods = slices.Delete(r.pods, i, i+1)
		return "removed pod " + path.Base(p)
	}
	return "nothing"
}

// counterFiles bounds the counter files a steady scan keeps open for n
// cgroups.
func (r *randomTree) counterFiles(n int) int {
	if r.s.V2() {
		return n * 8 // cpu.stat memory.current memory.stat pids.current 3×pressure cgroup.procs
	}
	return n * 6 // cpu.stat cpuacct.usage cpuacct.stat memory.usage_in_bytes memory.stat pids.current (v1 pid lists are opened afresh)
}

// TestSteadyCountersAreFresh: counters read through kept descriptors are
// the kernel's figures of the moment, not the first read's: a burner's
// CPU usage grows from scan to scan, its process is counted while it runs
// and not after, and a cgroup removed and made again under the same name
// reads as the new one (its usage starts again from 0).
func TestSteadyCountersAreFresh(t *testing.T) {
	s := realtest.NewScratch(t)
	s.Mkdir("busy")
	sc, err := inventory.Open(s.Host)
	if err != nil {
		t.Fatal(err)
	}
	sc.Base = s.Name
	st, err := inventory.NewSteady(sc, s.Host, inventory.SteadyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	busy := s.Cgroup("busy")
	get := func() *inventory.Cgroup {
		t.Helper()
		n, err := sc.Scan(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		c := n.Find(busy)
		if c == nil || c.Stats.CPU.UsageNs == nil || c.Stats.Procs == nil {
			t.Fatalf("%s: not scanned, or usage or procs unknown", busy)
		}
		return c
	}
	burner := s.Burn("busy", -1)
	// Each round: wait until a fresh open+read of the usage shows it
	// moved past what the kept descriptor gave last, then scan: the kept
	// descriptor must give at least that fresh figure (a stale one would
	// repeat the last).
	usageFile := s.Path("busy", "cpuacct.usage")
	if s.V2() {
		usageFile = s.Path("busy", "cpu.stat")
	}
	last := *get().Stats.CPU.UsageNs
	for i := range 3 {
		var fresh uint64
		poll.Every(50*time.Millisecond).Until(t, 10*time.Second, fmt.Sprintf("the burner's usage past %d ns", last), func() (bool, string, error) {
			fresh = freshUsage(t, s, usageFile)
			return fresh > last, fmt.Sprintf("%d ns", fresh), nil
		})
		c := get()
		if u := *c.Stats.CPU.UsageNs; u < fresh {
			t.Fatalf("round %d: steady scan read usage %d ns, below the %d ns read afresh just before: a kept descriptor gave a stale figure", i, u, fresh)
		} else {
			last = u
		}
		if *c.Stats.Procs != 1 {
			t.Fatalf("round %d: %d processes in the burner's cgroup, want 1", i, *c.Stats.Procs)
		}
	}
	burner.Process.Kill()
	burner.Wait()
	if p := *get().Stats.Procs; p != 0 {
		t.Fatalf("%d processes after the burner was killed, want 0", p)
	}
	for _, p := range s.Points {
		if err := s.Host.Rmdir(path.Join(p, busy)); err != nil {
			t.Fatal(err)
		}
		if err := s.Host.Mkdir(path.Join(p, busy)); err != nil {
			t.Fatal(err)
		}
	}
	if u := *get().Stats.CPU.UsageNs; u >= last {
		t.Fatalf("usage %d ns after the cgroup was made again, want less than the old one's %d", u, last)
	}
	if k := st.Counts().Kept; k.Reopens == 0 {
		t.Fatalf("no descriptor was found stale and reopened: %s", k)
	}
}

// freshUsage reads a cgroup's CPU usage with open+read+close (v1
// cpuacct.usage, or v2 cpu.stat's usage_usec), in ns.
func freshUsage(t *testing.T, s *realtest.Scratch, file string) uint64 {
	t.Helper()
	b, err := s.Host.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.TrimSpace(string(b))
	if strings.HasSuffix(file, "cpu.stat") {
		for _, l := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n * 1000
			}
		}
		t.Fatalf("%s: no usage_usec", file)
	}
	n, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
