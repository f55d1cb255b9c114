// Package hold keeps the CPU weights of sized BestEffort pods (VM runner
// pods, sandboxes) at their targets while the kubelet keeps resetting
// them.
//
// The kubelet writes cpu.shares=2 (v2: cpu.weight=1) to the BestEffort
// tier about every minute and whenever a pod starts or stops; `cgwarden
// fix` can raise the tier once, but only a process that stays can hold it.
// A Holder computes the targets with the same plan as `fix`
// (plan.WeightTargets: what the kubelet would write if each sized pod
// requested its size), applies the first write of each file through the
// fix engine, so that it is journaled with the value it replaced and
// `cgwarden revert` can restore it, and then:
//
//   - watches every target file with inotify: a write(2) by anyone raises
//     IN_MODIFY, and the Holder reads the file and writes its target back
//     at once — without rescanning the node, and without a journal line
//     (the original value is journaled already; a journal that grew by a
//     line per kubelet reset would grow forever);
//   - watches the BestEffort tier and each sized pod's cgroup for IN_CREATE
//     and IN_DELETE, and looks at the pods' sizes every Check, and plans
//     again when a pod or container appears or goes or a size changes;
//   - reads every target again every Poll, in case an event was lost.
//
// It counts what it corrected for /metrics: resets per cgroup, the time
// between noticing an overwrite and restoring the target, and the
// time-weighted weight each file actually held.
//
// A Holder does not scan, watch or write on its own: it runs in the
// agent's node loop (internal/agent), which offers it every scan it makes
// (Holder.Offer; a fresh one, Loop.Fresh, only when cgroups came or went
// or a size changed), lends it a subscription to the loop's one inotify
// Hub, and makes its writes on the agent's one applier. Its tests run it
// there too, in the agent, as `serve --fix` does.
package hold
