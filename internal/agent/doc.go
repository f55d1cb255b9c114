// Package agent is cgwarden's node agent (`cgwarden serve`), shaped as
// metrics-server and kube-scheduler's app packages are: Options (what the
// flags say) → Config (checked and parsed once) → Complete (sources,
// clients, the host opened) → Run.
//
// The agent runs one node loop (Loop). The loop owns the host door, one
// scanner with its steady-state cache (inventory.Steady), one metadata
// source (pods and the VM sizes the weight holder enforces, hold.MetaSource)
// and one inotify instance (cgroupfs.Hub) whose events are fanned out by
// path to its subscribers. Each tick it publishes an immutable Picture
// {Node, Meta, Report}: serve renders it, Events read its audit, the
// adopter plans from it. The weight holder plans from fresh pictures too:
// its sub-second path is a subscription to the loop's Hub for its target
// files, and it asks the loop for a fresh scan (Loop.Fresh, a kick)
// instead of scanning itself. One applier goroutine makes every write of
// the agent, so the holder's restores and the adopter's moves never
// interleave. /metrics counts what the agent holds open on the host
// (cgwarden_agent_*): one scanner's descriptors and one inotify instance,
// and the VM objects it watches (podsource.VMWatches: one per VM its
// node's pods reference, none other).
// The holder's and the adopter's engines share one journal (its lock
// makes them wait for each other). They run only while the agent holds
// the node's locks (nodeLocks, held for the agent's life): the node lock,
// a flock on the kubelet's root cgroup that every agent on the node
// shares whatever its --journal-dir, then the agent lock of its journal
// directory (journal.AgentLockName). A second agent on the node — a
// DaemonSet update with maxSurge, one started by hand with another
// journal directory — serves but waits, and never writes between the
// first's writes; the metadata source believes a --pods file as every
// command does (podsource.Vouched: the operator's input), and of pods
// read live only the sizes the size-trust checker allows (sizetrust,
// --trust-size-annotations), capped at the Node's allocatable CPU and at
// the namespace's --max-size bound, logging each size it refuses;
// /healthz and /readyz follow the loop's scans (serve.Server.Looping).
//
// Helpers shared with cgwarden-sizer and `cgwarden nri` (the API
// server's client configuration, the HTTP server with its timeouts) live
// in apiconn and serve.
package agent
