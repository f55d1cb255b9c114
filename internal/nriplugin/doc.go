// Package nriplugin prevents misplacement: an NRI (Node Resource Interface)
// plugin that names every new container's cgroup where the kubelet's layout
// puts it, before the runtime creates it.
//
// Runtimes such as the runwasi/Spin shim take the systemd-style
// linux.cgroupsPath of the OCI spec ("<slice>:cri-containerd:<id>") as a
// literal directory name and create the container outside its pod (seed
// 003). Repair (package plan's Adopt, run by `serve --fix`) moves the
// processes back afterwards, but the pod is blind and unisolated until then
// and memory charged before the move stays behind. containerd ≥ 1.7 (on by
// default in 2.x) and CRI-O ≥ 1.26 call NRI plugins before a container is
// created, and a plugin may rewrite cgroupsPath: for the runtime handlers
// it is told about (--runtime-handlers, and those the agent learned
// misplace containers on this node, a file beside the journal), this
// plugin sets it to the absolute cgroupfs path of the kubelet's layout
// (layout.PodCgroup from the pod's cgroup parent, then
// layout.ContainerPath — the same path Adopt moves a container to). Every
// other container is left untouched: a systemd-aware runtime (runc with
// SystemdCgroup) needs the slice:prefix:name form and would refuse a path.
//
// Safe by construction: the plugin never returns an error for a container
// (NRI fails the creation on a plugin error), so a container it cannot
// place is logged, counted and let through for repair to catch; a panic is
// recovered the same way; and the runtime's own request timeout drops a
// plugin that hangs, without failing the creation. Every decision is
// logged and counted (Metrics), a real change is raised as an Event on
// the pod, and DryRun only says what it would change.
package nriplugin
