package audit

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// The live tests build, inside a scratch cgroup, the kubelet-shaped trees
// of the seeds with CPU burners in them, and run the audit on what the
// kernel then reports. They pass on cgroup v1 (this machine) and v2 (the
// scripts/vmtest guest): weights are written as v1 shares or, on v2, as
// the kubelet's linear conversion of them.

const (
	vmUID0  = "0a000000-0000-4000-8000-000000000001"
	vmUID1  = "0a000000-0000-4000-8000-000000000002"
	vmUID2  = "0a000000-0000-4000-8000-000000000003"
	busyUID = "0b000000-0000-4000-8000-000000000001"
	spinUID = "0c000000-0000-4000-8000-000000000001"
	qemuUID = "0d000000-0000-4000-8000-000000000001"
)

func hexID(n int) string { return fmt.Sprintf("%064x", n) }

func under(uid string) string { return strings.ReplaceAll(uid, "-", "_") }

// setWeight writes a weight given in v1 shares: cpu.shares on v1, the
// kubelet's linear cpu.weight on v2.
func setWeight(s *realtest.Scratch, rel string, shares uint64) {
	if s.V2() {
		s.Write(rel, "cpu.weight", fmt.Sprint(fairness.SharesToWeightLinear(shares)))
	} else {
		s.Write(rel, "cpu.shares", fmt.Sprint(shares))
	}
}

// liveAudit scans the scratch twice, interval apart, with thread times and
// rates, and audits it.
func liveAudit(t *testing.T, s *realtest.Scratch, meta *metadata.Set, interval time.Duration) (*Report, *inventory.Node) {
	t.Helper()
	sc, err := inventory.Open(s.Host)
	if err != nil {
		t.Fatal(err)
	}
	sc.Base = s.Name
	smp := &inventory.Sampling{Meta: meta, Demand: true}
	n2, err := smp.Live(sc, interval, 10, func(_, n int) { time.Sleep(interval / time.Duration(n)) })
	if err != nil {
		t.Fatal(err)
	}
	return Run(&Input{Node: n2, Meta: meta}), n2
}

func find(r *Report, rule string, match func(Finding) bool) (Finding, bool) {
	for _, f := range r.Findings {
		if f.Rule == rule && match(f) {
			return f, true
		}
	}
	return Finding{}, false
}

// TestLiveBestEffortVMs reproduces seed 000: a BestEffort tier at the
// minimum weight holding three VM pods of 0.25, 1 and 4 CPUs at the
// minimum weight each, beside a Burstable tier of 32076 shares with one
// busy pod, everything burning on one CPU. The kernel starves the VMs, and
// the audit says so: besteffort-starvation errors for the three VMs and a
// size-blind-weights error for the tier.
func TestLiveBestEffortVMs(t *testing.T) {
	s := realtest.NewScratch(t)
	setWeight(s, "", fairness.MaxShares) // a busy machine's other work must not starve the test's burners
	be := "kubepods.slice/kubepods-besteffort.slice"
	bu := "kubepods.slice/kubepods-burstable.slice"
	s.Mkdir("kubepods.slice")
	s.Mkdir(be)
	s.Mkdir(bu)
	setWeight(s, be, 2)
	setWeight(s, bu, 32076)
	var pods []metadata.Pod
	for i, vm := range []struct {
		uid, name, size string
	}{{vmUID0, "vm-small", "250m"}, {vmUID1, "vm-mid", "1"}, {vmUID2, "vm-big", "4"}} {
		pod := be + "/kubepods-besteffort-pod" + under(vm.uid) + ".slice"
		ctr := pod + "/cri-containerd-" + hexID(i+1) + ".scope"
		s.Mkdir(pod)
		s.Mkdir(ctr)
		setWeight(s, pod, 2)
		setWeight(s, ctr, 2)
		s.Burn(ctr, 0)
		zero := int64(0)
		pods = append(pods, metadata.Pod{UID: vm.uid, Name: vm.name + "-runner", Namespace: "default", QoS: "besteffort",
			Labels: map[string]string{vmsize.LabelNeonVM: vm.name}, RequestMilliCPU: &zero, LimitMilliCPU: &zero})
	}
	busyPod := bu + "/kubepods-burstable-pod" + under(busyUID) + ".slice"
	busyCtr := busyPod + "/cri-containerd-" + hexID(9) + ".scope"
	s.Mkdir(busyPod)
	s.Mkdir(busyCtr)
	setWeight(s, busyPod, 32076)
	setWeight(s, busyCtr, 32076)
	busy := s.Burn(busyCtr, 0)
	// Kill the busy burner first when the test ends: a process starved at
	// weight 2 needs CPU to die, and gets one slice in tens of seconds.
	t.Cleanup(func() { _ = busy.Process.Kill() })
	req := int64(31325)
	pods = append(pods, metadata.Pod{UID: busyUID, Name: "busy", Namespace: "default", QoS: "burstable", RequestMilliCPU: &req})

	meta := metadata.NewSet(pods)
	vms := `{"kind":"List","items":[` +
		`{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","metadata":{"name":"vm-small","namespace":"default"},"spec":{"guest":{"cpus":{"use":"250m"}}}},` +
		`{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","metadata":{"name":"vm-mid","namespace":"default"},"spec":{"guest":{"cpus":{"use":1}}}},` +
		`{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","metadata":{"name":"vm-big","namespace":"default"},"spec":{"guest":{"cpus":{"use":4}}}}]}`
	list, err := metadata.ParseVMs(strings.NewReader(vms))
	if err != nil {
		t.Fatal(err)
	}
	if un := meta.ApplyVMs(list); len(un) > 0 {
		t.Fatalf("VMs without pods: %v", un)
	}
	time.Sleep(300 * time.Millisecond)
	r, n := liveAudit(t, s, meta, 2*time.Second)

	// The kernel: the Burstable burner gets CPU 0, the VMs a sliver.
	beC, buC := n.Find(s.Cgroup(be)), n.Find(s.Cgroup(bu))
	if beC == nil || buC == nil || beC.UsageCores == nil || buC.UsageCores == nil {
		t.Fatal("tiers or their usage missing from the scan")
	}
	if *buC.UsageCores < 0.1 || *beC.UsageCores > 0.05**buC.UsageCores {
		t.Errorf("kernel split: Burstable %.3f cores, BestEffort %.4f: the VMs were not starved", *buC.UsageCores, *beC.UsageCores)
	}
	for _, uid := range []string{vmUID0, vmUID1, vmUID2} {
		f, ok := find(r, rules.BestEffortStarvation, func(f Finding) bool { return f.Subject.PodUID == uid })
		if !ok || f.Severity != Error {
			t.Errorf("no besteffort-starvation error for VM pod %s; findings: %v", uid, ruleIDs(r))
			continue
		}
		if g, _ := f.Evidence.Get("podGuaranteedCores"); g.(float64) >= 0.01 {
			t.Errorf("VM pod %s guaranteed %v cores", uid, g)
		}
		if d, ok := f.Evidence.Get("demandCores"); !ok || d.(float64) < 0.9 {
			t.Errorf("VM pod %s: demand %v, want its burner's ~1 core", uid, d)
		}
	}
	if f, ok := find(r, rules.SizeBlindWeights, func(f Finding) bool { return strings.HasSuffix(f.Subject.Cgroup, be) }); !ok || f.Severity != Error {
		t.Errorf("no size-blind-weights error for the BestEffort tier; findings: %v", ruleIDs(r))
	}
	if len(r.Findings) == 0 || r.Findings[0].Rule != rules.BestEffortStarvation {
		t.Errorf("findings do not start with besteffort-starvation: %v", ruleIDs(r))
	}
}

// TestLiveMisplacedContainer reproduces seed 003: a pod cgroup left empty
// and its container's cgroup made as the literal
// "<pod slice>:cri-containerd:<id>" directory beside kubepods, burning
// CPU. The audit reports the misplaced container and the pod whose own
// cgroup reads (near) zero.
func TestLiveMisplacedContainer(t *testing.T) {
	s := realtest.NewScratch(t)
	setWeight(s, "", fairness.MaxShares) // a busy machine's other work must not starve the test's burners
	pod := "kubepods.slice/kubepods-pod" + under(spinUID) + ".slice"
	literal := "kubepods-pod" + under(spinUID) + ".slice:cri-containerd:" + hexID(3)
	s.Mkdir("kubepods.slice")
	s.Mkdir(pod)
	s.Mkdir(literal)
	s.Burn(literal, 0)
	r, _ := liveAudit(t, s, nil, time.Second)
	m, ok := find(r, rules.MisplacedContainer, func(f Finding) bool { return f.Subject.ContainerID == hexID(3) })
	if !ok || m.Severity != Error || m.Subject.PodUID != spinUID {
		t.Fatalf("no misplaced-container error for the literal directory; findings: %v", ruleIDs(r))
	}
	g, ok := find(r, rules.PodAccountingGap, func(f Finding) bool { return f.Subject.PodUID == spinUID })
	if !ok {
		t.Fatalf("no pod-accounting-gap for the pod; findings: %v", ruleIDs(r))
	}
	pc, _ := g.Evidence.Get("podCgroupUsageCores")
	cc, _ := g.Evidence.Get("containersUsageCores")
	if pc.(float64) > 0.01 || cc.(float64) < 0.1 {
		t.Errorf("pod cgroup %v cores, container %v: want ~0 and a burner's share", pc, cc)
	}
	if r.Findings[0].Rule != rules.MisplacedContainer || r.Findings[1].Rule != rules.PodAccountingGap {
		t.Errorf("findings do not start with misplaced-container, pod-accounting-gap: %v", ruleIDs(r))
	}
}

// TestLiveEscapedProcess: NeonVM's QEMU moved to a root-level
// neonvm-qemu-<pod> cgroup (here: at the scratch's root level, beside
// kubepods) while its runner pod sits in the BestEffort tier.
func TestLiveEscapedProcess(t *testing.T) {
	s := realtest.NewScratch(t)
	setWeight(s, "", fairness.MaxShares) // a busy machine's other work must not starve the test's burners
	pod := "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + under(qemuUID) + ".slice"
	s.Mkdir("kubepods.slice")
	s.Mkdir("kubepods.slice/kubepods-besteffort.slice")
	s.Mkdir(pod)
	s.Mkdir(pod + "/cri-containerd-" + hexID(5) + ".scope")
	s.Mkdir("neonvm-qemu-vm-escapee-abcde")
	s.Burn("neonvm-qemu-vm-escapee-abcde", 0)
	zero := int64(0)
	meta := metadata.NewSet([]metadata.Pod{{UID: qemuUID, Name: "vm-escapee-abcde", Namespace: "default", QoS: "besteffort",
		RequestMilliCPU: &zero, Labels: map[string]string{vmsize.LabelNeonVM: "vm-escapee"}}})
	r, _ := liveAudit(t, s, meta, time.Second)
	f, ok := find(r, rules.EscapedProcess, func(f Finding) bool { return f.Subject.PodUID == qemuUID })
	if !ok || f.Severity != Error {
		t.Fatalf("no escaped-process error naming the pod; findings: %v", ruleIDs(r))
	}
	if u, ok := f.Evidence.Get("usageCores"); !ok || u.(float64) < 0.1 {
		t.Errorf("escaped cgroup usage %v, want the burner's", u)
	}
	if p, _ := f.Evidence.Get("processes"); p != 1 {
		t.Errorf("escaped cgroup holds %v processes, want the burner", p)
	}
	// Without metadata the cgroup is still reported, by the pod name it
	// carries.
	r, _ = liveAudit(t, s, nil, 200*time.Millisecond)
	if _, ok := find(r, rules.EscapedProcess, func(f Finding) bool { return f.Subject.PodName == "vm-escapee-abcde" }); !ok {
		t.Errorf("no escaped-process finding without metadata; findings: %v", ruleIDs(r))
	}
}

func ruleIDs(r *Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, string(f.Severity)+"/"+f.Rule+" "+f.Subject.String())
	}
	return out
}
