package hold_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/agent"
	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// rig is a VM tree on the live kernel with the agent holding its weights
// (`serve --fix size-blind-weights,besteffort-starvation`).
type rig struct {
	t       *testing.T
	tree    *realtest.VMTree
	pods    *pods
	journal string
	// before are the tree's weights before the agent started.
	before map[string]uint64
	agent  *agent.Agent
	stop   func()
}

// The sizes seed 000's VMs declare together: the tier's cap is set to
// them (--max-tier-cpu), as on a node with enough CPUs (this one has 2).
const capMilli = 7000

func newRig(t *testing.T) *rig { return newRigWith(t, nil) }

// newRigWith is newRig with the agent's options changed by opt. The
// holder reads the sizes every 100 ms (--size-check).
func newRigWith(t *testing.T, opt func(*agent.Options, *pods)) *rig {
	s := realtest.NewScratch(t)
	r := &rig{t: t, tree: realtest.NewVMTree(s, 500, 1000, 2000, 4000), pods: &pods{}, journal: t.TempDir()}
	r.pods.set(r.tree.Pods())
	r.before = r.weights()
	o := fixOptions(s.Name, r.pods, r.journal, weightRules...)
	o.MaxTierCPU, o.SizeCheck = strconv.Itoa(capMilli)+"m", 100*time.Millisecond
	if opt != nil {
		opt(o, r.pods)
	}
	r.agent, r.stop = startAgent(t, o)
	// A minute: setup, not a figure (a cold run's build storm, load 30
	// on two cores, kept the agent from its first plan for over 10 s).
	r.waitFor("the first plan", time.Now(), time.Minute, func() bool {
		return planned(t, r.agent) && r.tree.Weight(realtest.Kube+"/besteffort") == r.tierTarget(1000, 2000, 4000)
	})
	return r
}

// revert reverts what the agent's journal holds, as `cgwarden revert`
// does (stop the agent first).
func (r *rig) revert() {
	r.t.Helper()
	e := &fix.Engine{FS: r.tree.S.Host, Base: r.tree.S.Name, JournalDir: r.journal}
	defer e.Close()
	rep, err := e.Revert(true)
	if err != nil || len(rep.Failed()) > 0 {
		r.t.Fatalf("revert: %v %+v", err, rep)
	}
}

func (r *rig) tierTarget(sizes ...int64) uint64 {
	var sum uint64 = fairness.MinShares
	for _, m := range sizes {
		sum += fairness.MilliCPUToShares(m)
	}
	return r.tree.PodWeight(sum)
}

// waitFor polls cond every millisecond until it holds and returns the time
// since from; it fails the test limit after from.
func (r *rig) waitFor(what string, from time.Time, limit time.Duration, cond func() bool) time.Duration {
	r.t.Helper()
	poll.Every(time.Millisecond).UntilTrue(r.t, time.Until(from.Add(limit)), fmt.Sprintf("%s, within %v", what, limit), cond)
	return time.Since(from)
}

// metric reads one series of the agent's /metrics by its labels.
func (r *rig) metric(name string, labels map[string]string) float64 {
	r.t.Helper()
	v, ok := metric(r.t, r.agent, name, labels)
	if !ok {
		r.t.Fatalf("no %s%v", name, labels)
	}
	return v
}

// TestHoldAgainstTierResets: a kubelet-like resetter writes the minimum
// to the BestEffort tier every few seconds while the Holder runs. Every
// reset is counted and undone within 1 s (measured from the file), the
// journal does not grow, and the VM pods' share of the CPU over the whole
// run stays within 5 points of what their sizes give them (7 CPUs against
// 0.5: 93%), less the time each reset is left for the kubelet's read-back
// (DefaultRestoreDelay).
func TestHoldAgainstTierResets(t *testing.T) {
	realtest.LockCPU(t)
	r := newRig(t)
	r.tree.BurnAll(0)
	held := time.Now()
	time.Sleep(time.Second) // let the scheduler settle the new weights
	lines := len(journalEntries(t, r.journal))
	resets, every := 6, 10*time.Second // the kubelet's minute, compressed
	if testing.Short() {
		resets, every = 3, 2*time.Second
	}
	tier := realtest.Kube + "/besteffort"
	target := r.tree.Weight(tier)
	minimum := strconv.FormatUint(r.tree.PodWeight(fairness.MinShares), 10)
	cpu0 := r.cpu()
	start := time.Now()
	var worst time.Duration
	for i := 0; i < resets; i++ {
		time.Sleep(every)
		from := time.Now()
		r.tree.S.Write(tier, r.tree.WeightFile(), minimum)
		took := r.waitFor("restoring the tier", from, time.Second, func() bool { return r.tree.Weight(tier) == target })
		worst = max(worst, took)
	}
	time.Sleep(every / 2)
	cpu1 := r.cpu()
	share := vmShare(cpu0, cpu1)
	t.Logf("%d resets in %v: worst time to restore %v; VM pods %.4f of the CPU (%.3f s against %.3f s)", resets, time.Since(start).Round(time.Second), worst, share, cpu1.vm-cpu0.vm, cpu1.burst-cpu0.burst)
	// Resets must not starve the VMs: their share stays at least within 5
	// points of what their sizes give them. (On a heavily loaded machine
	// the kernel can serve the low-weight Burstable pod, deep in the
	// tree, even less than its weight says, which only raises the share.)
	// Each reset stays DefaultRestoreDelay (the kubelet's read-back) and a
	// little more at the minimum, when the VMs get next to nothing: that
	// fraction of the run is taken off what they may expect.
	off := float64(resets) * (hold.DefaultRestoreDelay + 50*time.Millisecond).Seconds() / time.Since(held).Seconds()
	if want := 7.0 / 7.5; share < want-0.05-off {
		t.Errorf("the VM pods got %.2f%% of the CPU over the run, want at least %.2f%% less 5 points and %.1f%% at the minimum; Burstable container procs %q weight %d, tier weight %d, pod weight %d",
			100*share, 100*want, 100*off, r.tree.S.Read(r.tree.Burstable.CtrRel, "cgroup.procs"), r.tree.Weight(r.tree.Burstable.CtrRel),
			r.tree.Weight(realtest.Kube+"/burstable"), r.tree.Weight(r.tree.Burstable.Rel))
	}
	labels := map[string]string{"role": "tier"}
	if got := r.metric("cgwarden_weight_resets_total", labels); got != float64(resets) {
		t.Errorf("cgwarden_weight_resets_total{role=tier} = %v, want %d", got, resets)
	}
	if off := r.metric("cgwarden_weight_off_target_seconds_total", labels); off <= 0 || off > float64(resets) {
		t.Errorf("cgwarden_weight_off_target_seconds_total{role=tier} = %v, want above 0 and under 1 s per reset", off)
	}
	// The time-weighted value is under the target by the same fraction,
	// and no more than 1% lower still.
	if eff := r.metric("cgwarden_weight_effective", labels); eff < (1-off-0.01)*float64(target) || eff > float64(target) {
		t.Errorf("cgwarden_weight_effective{role=tier} = %v, want just under the target %d (at least %.0f)", eff, target, (1-off-0.01)*float64(target))
	}
	if got := len(journalEntries(t, r.journal)); got != lines {
		t.Errorf("the journal grew from %d to %d entries while the holder undid resets", lines, got)
	}
}

// TestHoldFollowsSizesAndNewPods: a VM's size drops from 4 to 2 CPUs in
// its source, and a fourth sized pod appears; their weights and the
// tier's follow within 1 s. Afterwards revert puts every value back.
func TestHoldFollowsSizesAndNewPods(t *testing.T) {
	r := newRig(t)
	before := r.before

	big := r.tree.VMs[2]
	pods := r.tree.Pods()
	pods[2].Annotation[vmsize.AnnotationCPU] = "2"
	from := time.Now()
	r.pods.set(pods)
	took := r.waitFor("following the size change", from, time.Second, func() bool {
		return r.tree.Weight(big.Rel) == r.tree.PodWeight(fairness.MilliCPUToShares(2000)) &&
			r.tree.Weight(big.CtrRel) == r.tree.PodWeight(fairness.MilliCPUToShares(2000)) &&
			r.tree.Weight(realtest.Kube+"/besteffort") == r.tierTarget(1000, 2000, 2000)
	})
	t.Logf("size 4 → 2 CPUs: pod, container and tier weights followed in %v", took)

	from = time.Now()
	vm := r.tree.AddVM(1500)
	pods = r.tree.Pods()
	pods[2].Annotation[vmsize.AnnotationCPU] = "2"
	r.pods.set(pods)
	took = r.waitFor("weighing a new sized pod", from, time.Second, func() bool {
		return r.tree.Weight(vm.Rel) == r.tree.PodWeight(fairness.MilliCPUToShares(1500)) &&
			r.tree.Weight(vm.CtrRel) == r.tree.PodWeight(fairness.MilliCPUToShares(1500)) &&
			r.tree.Weight(realtest.Kube+"/besteffort") == r.tierTarget(1000, 2000, 2000, 1500)
	})
	t.Logf("a new 1.5-CPU pod: weighed %v after its cgroup appeared", took)

	r.stop()
	r.revert()
	after := r.weights()
	delete(after, vm.Rel)
	delete(after, vm.CtrRel)
	if after[vm.Rel] != before[vm.Rel] || len(after) != len(before) {
		t.Fatalf("weights after revert: %v, before: %v", after, before)
	}
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s: weight %d after revert, %d before", k, after[k], v)
		}
	}
	if w := r.tree.Weight(vm.Rel); w != r.tree.PodWeight(fairness.MinShares) {
		t.Errorf("the pod added mid-run kept weight %d after revert, want the kubelet's %d", w, r.tree.PodWeight(fairness.MinShares))
	}
}

// TestHoldReadsSizesWhenNotified: when every source of the sizes
// notifies (the Kubernetes source's informers) and no --size-check is
// given, the agent's holder has no timer of its own (hold.NoCheck): a
// size change is not read until the source notifies (the loop's next
// scan, which would carry it, is a minute away here); then the weights
// follow within a second.
func TestHoldReadsSizesWhenNotified(t *testing.T) {
	changes := metadata.NewChanges()
	r := newRigWith(t, func(o *agent.Options, p *pods) {
		o.Lister, o.SizeCheck, o.Interval = notifyingPods{p, changes}, 0, time.Minute
	})
	big := r.tree.VMs[2]
	pods := r.tree.Pods()
	pods[2].Annotation[vmsize.AnnotationCPU] = "2"
	listed := r.pods.listings()
	r.pods.set(pods)
	// Nothing says the sizes changed: no timer reads them. (A window in
	// which nothing may happen.)
	time.Sleep(500 * time.Millisecond)
	if w, old := r.tree.Weight(big.Rel), r.tree.PodWeight(fairness.MilliCPUToShares(4000)); w != old {
		t.Fatalf("the pod's weight moved to %d without a notification (NoCheck), want still %d", w, old)
	}
	if n := r.pods.listings() - listed; n != 0 {
		t.Fatalf("the pods were listed %d times without a notification (NoCheck), want none", n)
	}
	from := time.Now()
	changes.Notify()
	took := r.waitFor("following the notified size change", from, time.Second, func() bool {
		return r.tree.Weight(big.Rel) == r.tree.PodWeight(fairness.MilliCPUToShares(2000)) &&
			r.tree.Weight(realtest.Kube+"/besteffort") == r.tierTarget(1000, 2000, 2000)
	})
	t.Logf("size 4 → 2 CPUs, notified: pod and tier weights followed in %v", took)
}

// weights reads the weight of every cgroup of the tree.
func (r *rig) weights() map[string]uint64 {
	out := map[string]uint64{}
	rels := []string{realtest.Kube + "/besteffort", realtest.Kube + "/burstable", r.tree.Burstable.Rel, r.tree.Burstable.CtrRel}
	for _, vm := range r.tree.VMs {
		rels = append(rels, vm.Rel, vm.CtrRel)
	}
	for _, rel := range rels {
		out[rel] = r.tree.Weight(rel)
	}
	return out
}

type cpuReading struct{ vm, burst float64 }

func (r *rig) cpu() cpuReading {
	var c cpuReading
	for _, vm := range r.tree.VMs {
		c.vm += r.tree.S.CPUSeconds(vm.Rel)
	}
	c.burst = r.tree.S.CPUSeconds(r.tree.Burstable.Rel)
	return c
}

func vmShare(a, b cpuReading) float64 {
	vm, burst := b.vm-a.vm, b.burst-a.burst
	return vm / (vm + burst)
}

// TestHoldGivesTheTierBackWithTheLastSizedPod: the VMs' sizes are
// withdrawn one by one (their annotations gone, as when the sized pods
// are deleted and only unsized ones stay). The tier follows them down,
// and with the last one it is back at the kubelet's minimum within 1 s:
// unsized BestEffort pods do not keep a tier weighted for VMs that are
// gone. The journal holds nothing new for it (the tier's first value is
// recorded already), and a revert still finds the kubelet's value.
func TestHoldGivesTheTierBackWithTheLastSizedPod(t *testing.T) {
	r := newRig(t)
	lines := len(journalEntries(t, r.journal))
	tier := realtest.Kube + "/besteffort"
	minimum := r.tree.PodWeight(fairness.MinShares)
	left := []int64{1000, 2000, 4000}
	for i := range r.tree.VMs {
		// Fresh metadata each time (the holder reads the last set's
		// maps): Pods() lists the VMs in order, then the Burstable pod.
		pods := r.tree.Pods()
		for _, p := range pods[:i+1] {
			delete(p.Annotation, vmsize.AnnotationCPU)
		}
		left = left[1:]
		from := time.Now()
		r.pods.set(pods)
		want := r.tierTarget(left...)
		took := r.waitFor(fmt.Sprintf("the tier at %d with %d sized pods left", want, len(left)), from, time.Second, func() bool {
			return r.tree.Weight(tier) == want
		})
		t.Logf("%d sized pods left: the tier at %d in %v", len(left), want, took)
	}
	if got := r.tree.Weight(tier); got != minimum {
		t.Fatalf("no sized pod left: the tier weighs %d, want the kubelet's minimum %d", got, minimum)
	}
	if got := len(journalEntries(t, r.journal)); got != lines {
		t.Errorf("the journal grew from %d to %d entries for the tier's return", lines, got)
	}
	r.stop()
	r.revert()
	if got := r.tree.Weight(tier); got != minimum {
		t.Errorf("after revert the tier weighs %d, want the kubelet's %d", got, minimum)
	}
}

// TestHoldLeavesTheKubeletsReadBack: the kubelet (runc's cgroups
// library) writes the tier's cpu.shares and reads it back at once,
// failing when it finds another value; at its start that failure is
// fatal (the cluster lane's fault suite saw a restarted kubelet exit with
// "the minimum allowed cpu-shares is 2050"). A kubelet-like writer here
// reads back 20, 100 and 150 ms after its write, as a thread preempted
// on a loaded node would: it must find its own value every time (the
// holder leaves a changed file alone for DefaultRestoreDelay, 200 ms,
// after the last change it saw to it), and the holder must still restore
// the target within a second of each write. Each write comes 100 ms after
// the holder's restore of the one before, whose own change the holder also
// sees: it once counted its delay from that change and restored the
// kubelet's write 100 ms after it was made (seen in a CI run: restored
// inside the 20 ms read-back when the write fell just before that time).
func TestHoldLeavesTheKubeletsReadBack(t *testing.T) {
	r := newRig(t)
	tier := realtest.Kube + "/besteffort"
	target := r.tree.Weight(tier)
	minimum := r.tree.PodWeight(fairness.MinShares)
	for i := 0; i < 5; i++ {
		from := time.Now()
		r.tree.SetWeight(tier, minimum)
		for _, after := range []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond} {
			time.Sleep(time.Until(from.Add(after)))
			got := r.tree.Weight(tier)
			// A read that ends past the delay (a sleep overrun on a
			// loaded machine) may find a restore made in time.
			if read := time.Since(from); got != minimum && read < hold.DefaultRestoreDelay {
				t.Fatalf("write %d: the kubelet-like writer read back %d %v after writing %d: the holder restored inside its read-back", i+1, got, read.Round(time.Millisecond), minimum)
			}
		}
		took := r.waitFor("restoring the tier", from, time.Second, func() bool { return r.tree.Weight(tier) == target })
		t.Logf("write %d: read back intact, restored %v after", i+1, took)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestReplanLeavesAResetToTheRestorePath: the kubelet resets the tier just
// before a replan (a VM's size changed; the tier, at its cap, keeps its
// target). The replan finds the tier off its held target and leaves it to
// the restore path, as the reset's own event would: restored after
// RestoreDelay and counted. Before, the replan wrote it back at once, the
// event's restore then found the target, and the reset went uncounted
// (cgwarden_weight_resets_total 0, no off-target time).
func TestReplanLeavesAResetToTheRestorePath(t *testing.T) {
	r := newRig(t)
	tier := realtest.Kube + "/besteffort"
	target := r.tree.Weight(tier)
	labels := map[string]string{"role": "tier"}
	before := r.metric("cgwarden_weight_resets_total", labels)
	for i := 0; i < 3; i++ {
		// The reset, then at once a size the size check (every 100 ms)
		// plans from: 4 → 5 CPUs for the third VM, above the tier's
		// 7-CPU cap with the others' 3 either way.
		size := []string{"5", "4", "5"}[i]
		from := time.Now()
		r.tree.S.Write(tier, r.tree.WeightFile(), strconv.FormatUint(r.tree.PodWeight(fairness.MinShares), 10))
		pods := r.tree.Pods()
		pods[2].Annotation[vmsize.AnnotationCPU] = size
		r.pods.set(pods)
		milli, _ := strconv.ParseInt(size, 10, 64)
		want := r.tree.PodWeight(fairness.MilliCPUToShares(1000 * milli))
		took := r.waitFor("the new size and the tier's target", from, 2*time.Second, func() bool {
			return r.tree.Weight(r.tree.VMs[2].Rel) == want && r.tree.Weight(tier) == target
		})
		t.Logf("reset %d with a size %s CPUs: both held after %v", i+1, size, took.Round(time.Millisecond))
		r.waitFor("the reset counted", from, 2*time.Second, func() bool {
			return r.metric("cgwarden_weight_resets_total", labels) == before+float64(i+1)
		})
	}
	if off := r.metric("cgwarden_weight_off_target_seconds_total", labels); off < 3*hold.DefaultRestoreDelay.Seconds() {
		t.Errorf("cgwarden_weight_off_target_seconds_total{role=tier} = %v, want at least RestoreDelay for each of the 3 resets", off)
	}
}

// TestRestoreOfAnUnwrittenTargetIsJournaled: a sized pod's cgroup already
// at its target when first planned (nothing to write, nothing journaled:
// the kernel's 1024 for a new cgroup is a 1-CPU VM's target on v1), then
// the kubelet writes its minimum. The holder restores the target, through
// the journal, so that revert --all puts back the kubelet's minimum.
// Before, the restore wrote around the journal and revert left the target
// (the cluster lane's fault suite, seed 1796560840248274810).
func TestRestoreOfAnUnwrittenTargetIsJournaled(t *testing.T) {
	s := realtest.NewScratch(t)
	r := &rig{t: t, tree: realtest.NewVMTree(s, 500, 1000, 2000, 4000), pods: &pods{}, journal: t.TempDir()}
	r.pods.set(r.tree.Pods())
	vm := r.tree.VMs[0].Rel // 1 CPU (the first size is the Burstable pod's)
	target := r.tree.PodWeight(fairness.MilliCPUToShares(r.tree.VMs[0].MilliCPU))
	minimum := r.tree.PodWeight(fairness.MinShares)
	r.tree.SetWeight(vm, target)
	o := fixOptions(s.Name, r.pods, r.journal, weightRules...)
	o.MaxTierCPU, o.SizeCheck = strconv.Itoa(capMilli)+"m", 100*time.Millisecond
	r.agent, r.stop = startAgent(t, o)
	// A minute: setup, not a figure (a cold run's build storm, load 30
	// on two cores, kept the agent from its first plan for over 10 s).
	r.waitFor("the first plan", time.Now(), time.Minute, func() bool {
		return planned(t, r.agent) && r.tree.Weight(realtest.Kube+"/besteffort") == r.tierTarget(1000, 2000, 4000)
	})
	from := time.Now()
	r.tree.SetWeight(vm, minimum)
	took := r.waitFor("the target restored", from, 2*time.Second, func() bool { return r.tree.Weight(vm) == target })
	t.Logf("the kubelet's %d over the unwritten target %d restored %v after", minimum, target, took.Round(time.Millisecond))
	r.stop()
	r.revert()
	if got := r.tree.Weight(vm); got != minimum {
		t.Errorf("after revert --all the VM pod weighs %d, want the kubelet's %d (the target %d restored around the journal)", got, minimum, target)
	}
}
