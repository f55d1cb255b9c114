package examples_test

// The seed-000 example (seed-000-eks-neonvm.txtar, .pods.json and
// .vms.json) is generated, by TestSeed000Generated, with cgwarden's own
// code: the kubelet's MilliCPUToShares (fairness) for every weight and the
// snapshot seal (snapshot.Seal). What comes from seed 000 and what is
// reconstructed is written in the snapshot header it produces.

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

const (
	seedCPUs     = 48
	seedInterval = 10 // seconds
	seedCPU      = "/sys/fs/cgroup/cpu,cpuacct"
	seedMem      = "/sys/fs/cgroup/memory"
	seedPids     = "/sys/fs/cgroup/pids"
	unlimMem     = 9223372036854771712
)

// hashHex is the first n hex digits of the SHA-256 of s: the stable
// "random" names, IDs and counters of the example.
func hashHex(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

func hashInt(s string, n int) int64 {
	v, _ := strconv.ParseInt(hashHex(s, n), 16, 64)
	return v
}

func seedUID(name string) string {
	x := hashHex("uid:"+name, 32)
	return x[:8] + "-" + x[8:12] + "-4" + x[13:16] + "-a" + x[17:20] + "-" + x[20:32]
}

func seedCID(name string) string { return hashHex("cid:"+name, 64) }

func shares(milli int64) int64 { return int64(fairness.MilliCPUToShares(milli)) }

type seedContainer struct {
	name     string
	req, lim int64
	use      float64
}

type seedVM struct {
	name, min, max, use string
	cores               float64
}

type seedPod struct {
	name, ns, uid, qos string
	containers         []seedContainer
	labels             map[string]string
	vm                 *seedVM
	ids                []string
}

func (p *seedPod) req() int64 {
	var s int64
	for _, c := range p.containers {
		s += c.req
	}
	return s
}

// seedPods are the node's pods, in the order the pods file lists them.
func seedPods() []*seedPod {
	var pods []*seedPod
	pod := func(name, ns, qos string, cs []seedContainer, uid string) *seedPod {
		if uid == "" {
			uid = seedUID(ns + "/" + name)
		}
		p := &seedPod{name: name, ns: ns, uid: uid, qos: qos, containers: cs}
		pods = append(pods, p)
		return p
	}
	// Guaranteed pods: the six UIDs listed in the seed's `ls
	// kubepods.slice`. cb6dc9c2 is the seed's overprovisioning pod with 2
	// CPUs (2048 shares); the other five are reconstructed (names, sizes).
	for _, g := range []struct {
		name, ns, uid string
		c             seedContainer
	}{
		{"overprovisioning-6f7d78c958-2228t", "overprovisioning", "cb6dc9c2-eda7-4e8a-8e4a-948169e57cdc", seedContainer{"pause", 2000, 2000, 0.0}},
		{"overprovisioning-6f7d78c958-7gq4t", "overprovisioning", "22bf9367-60ee-4481-a762-addb5f83a056", seedContainer{"pause", 2000, 2000, 0.0}},
		{"compute-steep-cloud-73028561-7b9d6c5f4-j4m2x", "default", "7bbd817f-b4d6-4e6f-8ac1-50bc6e270a2d", seedContainer{"compute-node", 4000, 4000, 0.9}},
		{"prometheus-agent-0", "monitoring", "1035a83e-09cb-46e0-b56b-0ba59af9465c", seedContainer{"prometheus", 1000, 1000, 0.45}},
		{"compute-hidden-sea-61837204-85f7c9d6b-w7kq2", "default", "17f65edb-b99c-4530-8d93-3ff62c64f50f", seedContainer{"compute-node", 500, 500, 0.3}},
		{"node-problem-detector-x9z4c", "kube-system", "7daf1144-d3b5-4531-9a59-221f96a36a2b", seedContainer{"node-problem-detector", 250, 250, 0.05}},
	} {
		pod(g.name, g.ns, "guaranteed", []seedContainer{g.c}, g.uid)
	}

	// Burstable: daemon pods and compute pods whose requests sum to 31325m,
	// so that the tier is MilliCPUToShares(31325) = 32076 and the pods' own
	// shares (each rounded down) sum to 32052, both figures from the seed.
	for _, d := range []struct {
		name, ns string
		milli    int64
		use      float64
	}{
		{"aws-node", "kube-system", 25, 0.08}, {"kube-proxy", "kube-system", 100, 0.12},
		{"ebs-csi-node", "kube-system", 30, 0.01}, {"node-exporter", "monitoring", 200, 0.1},
		{"vector", "monitoring", 70, 0.35}, {"autoscaler-agent", "kube-system", 120, 0.2},
		{"kube-state-metrics", "monitoring", 370, 0.15}, {"neonvm-controller", "neonvm-system", 110, 0.09},
		{"cluster-autoscaler", "kube-system", 110, 0.05}, {"pgbouncer", "default", 450, 0.15},
	} {
		pod(d.name+"-"+hashHex(d.name, 5), d.ns, "burstable", []seedContainer{{d.name, d.milli, 0, d.use}}, "")
	}
	// The seed's compute pod: 250m + 10m + 10m = 270m, 276 shares.
	pod("compute-orange-recipe-53139292-5d85955d54-5hk7x", "default", "burstable",
		[]seedContainer{{"compute-node", 250, 0, 0.9}, {"pg-exporter", 10, 0, 0.02}, {"log-shipper", 10, 0, 0.01}},
		"050b4a85-f401-4ddb-a585-3d2120ee0132")
	adj := strings.Fields("quiet bold wild calm dark late icy red old wispy shy proud long lucky snowy sweet young dry divine aged fancy tight plain rough small soft black still broad crimson green holy lingering morning muddy noisy polished")
	noun := strings.Fields("pond sun moon hill wood dream dust rain fog leaf sky bird bonus math limit base snow paper cell night thunder frost grass feather tree band resonance water glade smoke star shadow truth voice wind breeze field")
	// 36 more compute pods with one container each (k*250m + 20m; fewer
	// cgroups keep the file small): k is 1 for 7 (and the seed's), 2 for
	// 14, 4 for 10, 8 for 5: Σk = 116.
	var ks []int64
	for _, g := range []struct{ k, n int64 }{{1, 7}, {2, 14}, {4, 10}, {8, 5}} {
		for range g.n {
			ks = append(ks, g.k)
		}
	}
	busy := map[int64]float64{1: 0.7, 2: 1.1, 4: 1.35, 8: 1.9}
	for i, k := range ks {
		is := strconv.Itoa(i)
		name := fmt.Sprintf("compute-%s-%s-%d-%s-%s", adj[i], noun[i], hashInt("n"+is, 7)%90000000+10000000, hashHex("rs"+is, 9), hashHex("p"+is, 5))
		pod(name, "default", "burstable", []seedContainer{{"compute-node", 250*k + 20, 0, busy[k]}}, "")
	}

	// BestEffort: NeonVM runner pods (no requests) for VMs of 0.25, 1 and
	// 4 CPUs, and one plain BestEffort pod with no declared size.
	for _, v := range []struct {
		vm   seedVM
		used float64
	}{
		{seedVM{"compute-silent-frost-42815591", "250m", "1", "250m", 0.25}, 0.0008},
		{seedVM{"compute-bold-river-17340288", "1", "2", "1", 1.0}, 0.0009},
		{seedVM{"compute-green-meadow-90412257", "2", "4", "4", 4.0}, 0.0007},
	} {
		p := pod(v.vm.name+"-"+hashHex("vm"+v.vm.name, 5), "default", "besteffort", []seedContainer{{"neonvm-runner", 0, 0, v.used}}, "")
		p.labels = map[string]string{"vm.neon.tech/name": v.vm.name, "vm.neon.tech/runner": "true"}
		vm := v.vm
		p.vm = &vm
	}
	pod("netshoot-7c9d4b8f5-q8r2n", "default", "besteffort", []seedContainer{{"netshoot", 0, 0, 0.0005}}, "")
	return pods
}

type seedTask struct {
	tid  int64
	vcpu bool
}

// seedCgroup is one cgroup of the node and what it holds.
type seedCgroup struct {
	path        string
	weight      int64
	quota       int64
	own         float64 // cores used by its own processes
	mem, memLim int64
	procs       []int64
	tasks       []seedTask // nil: no thread data
	kids        []*seedCgroup
}

func newCgroup(path string, weight int64) *seedCgroup {
	return &seedCgroup{path: path, weight: weight, quota: -1, memLim: unlimMem}
}

func (c *seedCgroup) add(k *seedCgroup) *seedCgroup {
	c.kids = append(c.kids, k)
	return k
}

func (c *seedCgroup) usage() float64 {
	var kids float64
	for _, k := range c.kids {
		kids += k.usage()
	}
	return c.own + kids
}

func (c *seedCgroup) memory() int64 {
	m := c.mem
	for _, k := range c.kids {
		m += k.memory()
	}
	return m
}

func (c *seedCgroup) walk(fn func(*seedCgroup)) {
	fn(c)
	for _, k := range c.kids {
		k.walk(fn)
	}
}

// seedTree is the node's cgroup tree (systemd driver, v1 hybrid); its
// root, the kubelet's allocatable milli-CPU and the Burstable tier.
func seedTree(pods []*seedPod) (root *seedCgroup, alloc int64, burstable *seedCgroup) {
	pid := int64(3000)
	newPID := func() int64 { pid += 7; return pid }
	root = newCgroup("/", 1024)
	root.own = 0.05
	sysd := root.add(newCgroup("/system.slice", 1024))
	for _, s := range []struct {
		name string
		use  float64
		mem  int64
	}{{"containerd.service", 0.2, 300 << 20}, {"kubelet.service", 0.3, 180 << 20}, {"sshd.service", 0.0, 4 << 20},
		{"amazon-ssm-agent.service", 0.01, 40 << 20}, {"systemd-journald.service", 0.04, 60 << 20}} {
		c := sysd.add(newCgroup("/system.slice/"+s.name, 1024))
		c.own, c.mem, c.procs = s.use, s.mem, []int64{newPID()}
	}
	user := root.add(newCgroup("/user.slice", 1024))
	user.own, user.mem, user.procs = 0.02, 20<<20, []int64{newPID()}
	alloc = seedCPUs*1000 - 190 // EKS kube-reserved for 48 vCPUs: 60m + 10m + 2×5m + 44×2.5m
	kp := root.add(newCgroup("/kubepods.slice", shares(alloc)))
	be := kp.add(newCgroup("/kubepods.slice/kubepods-besteffort.slice", 2))
	var burstReq int64
	for _, p := range pods {
		if p.qos == "burstable" {
			burstReq += p.req()
		}
	}
	bu := kp.add(newCgroup("/kubepods.slice/kubepods-burstable.slice", shares(burstReq)))
	for _, p := range pods {
		u := strings.ReplaceAll(p.uid, "-", "_")
		parent, name := kp, "kubepods-pod"+u+".slice"
		if p.qos != "guaranteed" {
			parent = be
			if p.qos == "burstable" {
				parent = bu
			}
			name = "kubepods-" + p.qos + "-pod" + u + ".slice"
		}
		req, lim := p.req(), int64(0)
		if !slices.ContainsFunc(p.containers, func(c seedContainer) bool { return c.lim == 0 }) {
			for _, c := range p.containers {
				lim += c.lim
			}
		}
		pc := parent.add(newCgroup(parent.path+"/"+name, shares(req)))
		if lim != 0 {
			pc.quota = lim * 100
		}
		if p.qos == "guaranteed" {
			pc.memLim = (512 << 20) * max(1, req/250)
		}
		sandbox := pc.add(newCgroup(pc.path+"/cri-containerd-"+seedCID("sandbox:"+p.uid)+".scope", 2))
		sandbox.mem, sandbox.procs = 300<<10, []int64{newPID()}
		for _, c := range p.containers {
			id := seedCID(p.uid + "/" + c.name)
			p.ids = append(p.ids, id)
			cg := newCgroup(pc.path+"/cri-containerd-"+id+".scope", shares(c.req))
			if c.lim != 0 {
				cg.quota = c.lim * 100
			}
			cg.own, cg.procs = c.use, []int64{newPID()}
			switch {
			case p.vm != nil:
				// The runner applies the VM's size as a CFS quota
				// (reconstructed: the runner really sets it on the QEMU
				// process's cgroup).
				cg.quota = int64(p.vm.cores * 100000)
				qemu := newPID()
				cg.procs = append(cg.procs, qemu)
				vcpus := max(1, int64(math.Ceil(p.vm.cores)))
				// runner: 3 mostly idle threads; qemu: main loop, vcpus
				// busy threads, 2 io threads.
				for t := range int64(3) {
					cg.tasks = append(cg.tasks, seedTask{cg.procs[0] + t, false})
				}
				cg.tasks = append(cg.tasks, seedTask{qemu, false})
				for t := range vcpus {
					cg.tasks = append(cg.tasks, seedTask{qemu + 1 + t, true})
				}
				cg.tasks = append(cg.tasks, seedTask{qemu + 1 + vcpus, false}, seedTask{qemu + 2 + vcpus, false})
			case c.use >= 0.05:
				// A busy container: more runnable threads than the CPU it
				// gets on this saturated node (their run + wait time says
				// so).
				cg.tasks = []seedTask{{cg.procs[0], false}}
				for t := range int64(math.Ceil(c.use)) + 1 {
					cg.tasks = append(cg.tasks, seedTask{cg.procs[0] + 1 + t, true})
				}
			}
			switch {
			case p.vm != nil:
				cg.mem = 1 << 30
			case c.name == "compute-node":
				cg.mem = 120 << 20
			default:
				cg.mem = 24 << 20
			}
			pc.add(cg)
		}
	}
	return root, alloc, bu
}

// seedFiles are the files of c in the two samples.
func seedFiles(c *seedCgroup, first, second map[string]string) {
	both := func(name, v1 string, v2 ...string) {
		first[name] = v1
		second[name] = v1
		if len(v2) > 0 {
			second[name] = v2[0]
		}
	}
	p := c.path
	if p == "/" {
		p = ""
	}
	// Cumulative usage before sample 1, ns.
	u1 := int64(float64(hashInt("base"+c.path, 8)%1_000_000_000_000) + c.usage()*86400*1e9*3)
	u2 := u1 + int64(math.RoundToEven(c.usage()*seedInterval*1e9))
	cpu := seedCPU + p
	if c.path != "/" {
		both(cpu+"/cpu.shares", fmt.Sprintf("%d\n", c.weight))
		both(cpu+"/cpu.cfs_period_us", "100000\n")
		both(cpu+"/cpu.cfs_quota_us", fmt.Sprintf("%d\n", c.quota))
	} else {
		both(cpu+"/cpu.shares", "1024\n")
	}
	var nper1, nper2 int64
	if c.quota > 0 {
		nper1 = int64(float64(u1) / 1e9 * 10)
		nper2 = nper1 + seedInterval*10
	}
	// Starved, not throttled: the VMs never reach their quota.
	both(cpu+"/cpu.stat", fmt.Sprintf("nr_periods %d\nnr_throttled 0\nthrottled_time 0\n", nper1),
		fmt.Sprintf("nr_periods %d\nnr_throttled 0\nthrottled_time 0\n", nper2))
	both(cpu+"/cpuacct.usage", fmt.Sprintf("%d\n", u1), fmt.Sprintf("%d\n", u2))
	both(cpu+"/cpuacct.stat", fmt.Sprintf("user %d\nsystem %d\n", u1*7/10/1e7, u1*3/10/1e7),
		fmt.Sprintf("user %d\nsystem %d\n", u2*7/10/1e7, u2*3/10/1e7))
	var procs strings.Builder
	for _, x := range c.procs {
		fmt.Fprintf(&procs, "%d\n", x)
	}
	both(cpu+"/cgroup.procs", procs.String())
	if len(c.kids) > 0 && c.path != "/" {
		both(cpu+"/tasks", "")
	}
	if c.tasks != nil {
		var tasks strings.Builder
		vcpus := 0
		for _, t := range c.tasks {
			fmt.Fprintf(&tasks, "%d\n", t.tid)
			if t.vcpu {
				vcpus++
			}
		}
		both(cpu+"/tasks", tasks.String())
		for _, t := range c.tasks {
			r1, w1, n1 := int64(1e12)+t.tid*1000, int64(5e12)+t.tid*1000, int64(1e6)+t.tid
			r2, w2 := r1+2_000_000, w1+100_000
			if t.vcpu {
				// Runnable the whole interval: ran its sliver, waited the
				// rest.
				run := c.own / float64(max(1, vcpus)) * seedInterval * 1e9
				r2, w2 = r1+int64(run), w1+int64(seedInterval*1e9-run)
			}
			both(fmt.Sprintf("/proc/%d/task/%d/schedstat", t.tid, t.tid), fmt.Sprintf("%d %d %d\n", r1, w1, n1), fmt.Sprintf("%d %d %d\n", r2, w2, n1+500))
		}
	}
	mem := seedMem + p
	m := c.memory()
	both(mem+"/memory.usage_in_bytes", fmt.Sprintf("%d\n", m))
	both(mem+"/memory.limit_in_bytes", fmt.Sprintf("%d\n", c.memLim))
	both(mem+"/memory.stat", fmt.Sprintf("cache %d\nrss %d\ntotal_cache %d\ntotal_rss %d\ntotal_inactive_file %d\ntotal_pgfault %d\ntotal_pgmajfault %d\n",
		m/4, c.mem-c.mem/4, m/4, m-m/4, m/8, m/4096, m/4096/500))
	if c.path != "/" {
		both(seedPids+p+"/pids.current", fmt.Sprintf("%d\n", max(len(c.procs), len(c.tasks))))
	}
}

const seedMountinfo = `30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:5 - cgroup2 cgroup2 rw,nsdelegate
31 25 0:27 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:6 - cgroup cgroup rw,xattr,name=systemd
34 25 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 25 0:31 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,memory
36 25 0:32 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,pids
37 25 0:33 / /sys/fs/cgroup/blkio rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,blkio
38 25 0:34 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,cpuset
39 25 0:35 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,freezer
`

func seedHeader(alloc int64) string {
	return fmt.Sprintf(`cgwarden snapshot v1
seal: sha256
taken: 2023-10-29T14:00:00Z
interval: %[1]ds
# origin: the EKS node of seed 000 (NeonVM, k8s 1.25, Amazon Linux 2, kernel 5.10, containerd 1.6, runc;
# cgroup v1 hybrid: cpu,cpuacct co-mounted, memory, pids, a cgroup2 at /sys/fs/cgroup/unified with no
# controllers; systemd driver).
# From the seed: the tier weights (kubepods-besteffort.slice 2, kubepods-burstable.slice 32076), the
# burstable pods' own shares summing to 32052 (no dilution), pod 050b4a85-… (default/compute-orange-
# recipe-53139292-5d85955d54-5hk7x, 250m+10m+10m) at 276, the Guaranteed overprovisioning pod
# cb6dc9c2-… at 2048, the six Guaranteed pod UIDs of the seed's `+"`ls kubepods.slice`"+`, and every
# BestEffort pod at 2 shares.
# Reconstructed (not measured): %[2]d vCPUs (an m6i.12xlarge; 16 cannot hold the 31.3 cores of
# Burstable requests that 32076 shares imply), kubepods.slice = MilliCPUToShares(allocatable %[3]dm),
# the names and sizes of the other pods (chosen so that the burstable figures come out exactly as in the
# seed), three NeonVM runner pods whose VMs use 0.25, 1 and 4 CPUs (each runner container carries its
# VM's size as a CFS quota, standing for the quota the runner sets on QEMU), a plain BestEffort pod,
# memory figures, and the second sample %[1]d s later with the node busy (about 47.7 of %[2]d
# cores): the VMs' vCPU threads runnable the whole interval (their /proc schedstat) yet getting about
# 0.0008 cores each, whatever their size; the busy containers' threads likewise runnable the whole
# interval (more threads than the CPU they get); other cgroups carry no thread data.
`, seedInterval, seedCPUs, alloc)
}

// seedSnapshot is the sealed snapshot text.
func seedSnapshot(root *seedCgroup, alloc int64) []byte {
	first, second := map[string]string{}, map[string]string{}
	root.walk(func(c *seedCgroup) { seedFiles(c, first, second) })
	var b bytes.Buffer
	b.WriteString(seedHeader(alloc))
	sec := func(name, data string) { fmt.Fprintf(&b, "-- %s --\n%s", name, data) }
	sec("/proc/self/mountinfo", seedMountinfo)
	sec("/sys/devices/system/cpu/online", fmt.Sprintf("0-%d\n", seedCPUs-1))
	names := make([]string, 0, len(first))
	for k := range first {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		sec(k, first[k])
	}
	for _, k := range names {
		if second[k] != first[k] {
			sec("next:"+k, second[k])
		}
	}
	return snapshot.Seal(b.Bytes())
}

// The pods file and the VMs file: JSON as `kubectl get -o json` lists it,
// fields in the API's order.
type (
	jsonList[T any] struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Items      []T    `json:"items"`
		Metadata   struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	jsonMeta struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		UID       string            `json:"uid"`
		Labels    map[string]string `json:"labels,omitempty"`
	}
	jsonQuantities struct {
		CPU    string `json:"cpu,omitempty"`
		Memory string `json:"memory,omitempty"`
	}
	jsonContainer struct {
		Name      string `json:"name"`
		Image     string `json:"image"`
		Resources struct {
			Requests *jsonQuantities `json:"requests,omitempty"`
			Limits   *jsonQuantities `json:"limits,omitempty"`
		} `json:"resources"`
		Command []string `json:"command,omitempty"`
	}
	jsonStatus struct {
		Name         string `json:"name"`
		ContainerID  string `json:"containerID"`
		Ready        bool   `json:"ready"`
		RestartCount int    `json:"restartCount"`
		Image        string `json:"image"`
		ImageID      string `json:"imageID"`
		Started      bool   `json:"started"`
		State        struct {
			Running struct {
				StartedAt string `json:"startedAt"`
			} `json:"running"`
		} `json:"state"`
	}
	jsonPod struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Metadata   jsonMeta `json:"metadata"`
		Spec       struct {
			NodeName   string          `json:"nodeName"`
			Containers []jsonContainer `json:"containers"`
		} `json:"spec"`
		Status struct {
			Phase             string       `json:"phase"`
			QOSClass          string       `json:"qosClass"`
			StartTime         string       `json:"startTime"`
			ContainerStatuses []jsonStatus `json:"containerStatuses"`
		} `json:"status"`
	}
	jsonCPUs struct {
		Min string `json:"min"`
		Max string `json:"max"`
		Use string `json:"use"`
	}
	jsonGuest struct {
		CPUs           jsonCPUs `json:"cpus"`
		MemorySlotSize string   `json:"memorySlotSize"`
		MemorySlots    struct {
			Min int `json:"min"`
			Max int `json:"max"`
			Use int `json:"use"`
		} `json:"memorySlots"`
	}
	jsonVM struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Metadata   jsonMeta `json:"metadata"`
		Spec       struct {
			Guest jsonGuest `json:"guest"`
		} `json:"spec"`
		Status struct {
			Phase   string `json:"phase"`
			PodName string `json:"podName"`
			CPUs    string `json:"cpus"`
		} `json:"status"`
	}
)

func quantity(milli int64) string {
	if milli%1000 != 0 {
		return fmt.Sprintf("%dm", milli)
	}
	return strconv.FormatInt(milli/1000, 10)
}

func guest(vm *seedVM) jsonGuest {
	g := jsonGuest{CPUs: jsonCPUs{vm.min, vm.max, vm.use}, MemorySlotSize: "1Gi"}
	g.MemorySlots.Min, g.MemorySlots.Max, g.MemorySlots.Use = 1, 4, 2
	return g
}

// indented is v as JSON indented by two spaces, without a final newline.
func indented(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func compact(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func seedPodsFile(t *testing.T, pods []*seedPod) []byte {
	qos := map[string]string{"guaranteed": "Guaranteed", "burstable": "Burstable", "besteffort": "BestEffort"}
	list := jsonList[jsonPod]{APIVersion: "v1", Kind: "List", Items: []jsonPod{}}
	for _, p := range pods {
		var jp jsonPod
		jp.APIVersion, jp.Kind = "v1", "Pod"
		jp.Metadata = jsonMeta{Name: p.name, Namespace: p.ns, UID: p.uid, Labels: p.labels}
		jp.Spec.NodeName = "ip-10-6-42-17.us-east-2.compute.internal"
		jp.Status.Phase, jp.Status.QOSClass, jp.Status.StartTime = "Running", qos[p.qos], "2023-10-28T09:00:00Z"
		for i, c := range p.containers {
			jc := jsonContainer{Name: c.name, Image: "example.invalid/" + c.name + ":v1"}
			r := &jc.Resources
			if c.req != 0 {
				r.Requests = &jsonQuantities{CPU: quantity(c.req)}
			}
			if c.lim != 0 {
				r.Limits = &jsonQuantities{CPU: quantity(c.lim)}
			}
			switch p.qos {
			case "guaranteed":
				r.Requests.Memory, r.Limits.Memory = "1Gi", "1Gi"
			case "burstable":
				if r.Requests == nil {
					r.Requests = &jsonQuantities{}
				}
				r.Requests.Memory = "256Mi"
			}
			if p.vm != nil {
				// The NeonVM controller starts the runner with its VM's
				// spec and status, base64-encoded JSON, as arguments.
				spec := struct {
					Guest         jsonGuest `json:"guest"`
					QMP           int       `json:"qmp"`
					RestartPolicy string    `json:"restartPolicy"`
				}{guest(p.vm), 20183, "Never"}
				status := struct {
					Phase string `json:"phase"`
				}{"Pending"}
				jc.Command = []string{"runner", "-vmspec", compact(t, spec), "-vmstatus", compact(t, status)}
			}
			jp.Spec.Containers = append(jp.Spec.Containers, jc)
			st := jsonStatus{Name: c.name, ContainerID: "containerd://" + p.ids[i], Ready: true, Image: jc.Image, Started: true}
			st.State.Running.StartedAt = "2023-10-28T09:00:00Z"
			jp.Status.ContainerStatuses = append(jp.Status.ContainerStatuses, st)
		}
		list.Items = append(list.Items, jp)
	}
	return indented(t, list)
}

func seedVMsFile(t *testing.T, pods []*seedPod) []byte {
	list := jsonList[jsonVM]{APIVersion: "v1", Kind: "List", Items: []jsonVM{}}
	for _, p := range pods {
		if p.vm == nil {
			continue
		}
		var v jsonVM
		v.APIVersion, v.Kind = "vm.neon.tech/v1", "VirtualMachine"
		v.Metadata = jsonMeta{Name: p.vm.name, Namespace: p.ns, UID: seedUID("vm:" + p.vm.name)}
		v.Spec.Guest = guest(p.vm)
		v.Status.Phase, v.Status.PodName, v.Status.CPUs = "Running", p.name, p.vm.use
		list.Items = append(list.Items, v)
	}
	return indented(t, list)
}

// TestSeed000Generated makes the seed-000 example with cgwarden's own
// code and compares it with the committed files; -update writes them.
// The figures taken from the seed are checked first: a change of the
// generator that loses them fails even with -update.
func TestSeed000Generated(t *testing.T) {
	pods := seedPods()
	root, alloc, burstable := seedTree(pods)
	var childSum int64
	for _, c := range burstable.kids {
		childSum += c.weight
	}
	if burstable.weight != 32076 || childSum != 32052 || len(pods) != 57 {
		t.Fatalf("the Burstable tier is %d, its pods' shares sum to %d, %d pods: the seed has 32076 and 32052 (57 pods made)", burstable.weight, childSum, len(pods))
	}
	if u := root.usage(); u < 47 || u > 48 {
		t.Errorf("the node uses %.2f cores, want about 47.7 of %d (busy)", u, seedCPUs)
	}
	base := filepath.Join("snapshots", "seed-000-eks-neonvm")
	for _, f := range []struct {
		ext  string
		data []byte
	}{
		{".txtar", seedSnapshot(root, alloc)},
		{".pods.json", seedPodsFile(t, pods)},
		{".vms.json", seedVMsFile(t, pods)},
	} {
		name := base + f.ext
		if *update {
			if err := os.WriteFile(name, f.data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(have, f.data) {
			i := 0
			for i < min(len(have), len(f.data)) && have[i] == f.data[i] {
				i++
			}
			lo := max(0, i-80)
			t.Errorf("%s differs from what the generator makes, from byte %d:\ncommitted: %q\ngenerated: %q\n(rerun with -update after changing the generator on purpose)",
				name, i, clipAt(have, lo, i+80), clipAt(f.data, lo, i+80))
		}
	}
}

func clipAt(b []byte, lo, hi int) []byte { return b[min(lo, len(b)):min(hi, len(b))] }
