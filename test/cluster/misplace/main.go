// Command misplace is a runc wrapper that misplaces containers the way the
// runwasi/Spin shim did before its 2025 fix (seed 003): it rewrites the
// container's cgroupsPath from the kubelet's cgroupfs form
//
//	/kubepods/<qos>/pod<uid>/<id>
//
// into the systemd form containerd hands a systemd-driven runtime,
//
//	/kubepods-<qos>-pod<uid with _>.slice:cri-containerd:<id>
//
// which runc's cgroupfs manager (like youki's, which runwasi drives with
// systemd off) takes as one LITERAL directory name at the root of every
// hierarchy. The kubelet then reads the pod's own cgroup, which holds only
// the sandbox, and reports the pod's CPU as 0; cgwarden's layout package
// calls the shape "literal-cgroups-path".
//
// Only app containers are moved (the bundle's annotation
// io.kubernetes.cri.container-type is "container"); the sandbox (pause)
// is left where runc puts it, under the pod's cgroup — unless the pod is
// annotated cgwarden.io/misplace-sandbox: "true" (and the handler passes
// that annotation through, pod_annotations), which misplaces the sandbox
// the same way. runwasi runs no
// process for the sandbox at all (its shim's task_create keeps the pause
// container as a process-less "base" instance), so its pod cgroup holds
// nothing; here it holds the idle pause process, whose CPU is next to 0.
//
// It is a Go program rather than a shell script because it must rewrite
// one field of a JSON document without touching the others (memory limits
// such as 9223372036854775807 must survive exactly), which POSIX sh cannot
// do without jq.
//
// Use: build it (scripts/cluster does, into its cache), then give
// containerd a CRI runtime handler whose runc binary it is, and a
// RuntimeClass naming that handler (scripts/cluster up makes both, named
// "misplace"):
//
//	[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.misplace]   # containerd 2.x: plugins."io.containerd.cri.v1.runtime".containerd.runtimes.misplace
//	  runtime_type = "io.containerd.runc.v2"
//	  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.misplace.options]
//	    BinaryName = "/path/to/misplace"
//
//	apiVersion: node.k8s.io/v1
//	kind: RuntimeClass
//	metadata: {name: misplace}
//	handler: misplace
//
// and run pods with runtimeClassName: misplace.
//
// On a node with the systemd cgroup driver (SystemdCgroup = true, the
// systemd node guest of scripts/vmtest --node) containerd already hands
// the runtime systemd's "<slice>:cri-containerd:<id>" and runc the global
// flag --systemd-cgroup: the wrapper is then the real shape of the bug, no
// translation, as the shim received it on the seed's k3s node. It drops
// --systemd-cgroup from the create of a container it misplaces, and runc's
// cgroupfs manager makes the name one literal directory at the root of the
// hierarchy, as youki did under runwasi. With CGWARDEN_MISPLACE_SELECT=
// annotated it misplaces only the pods annotated cgwarden.io/misplace:
// "true", for a node where it is the default handler. It then execs the real
// runc with the same arguments: $CGWARDEN_MISPLACE_RUNC if set (containerd
// passes its environment to the shim and the shim to runc), else the first
// runc on PATH that is not this program. Anything but a runc create or run
// of an app container passes through untouched. A cgroupsPath of an
// unknown shape fails the create with a message saying so, rather than
// running the container somewhere unexpected.
package main

import (
	"fmt"
	"os"
	"syscall"
)

func main() {
	args := os.Args[1:]
	if bundle, ok := bundleOf(args); ok {
		o, err := OptionsFromEnv()
		if err != nil {
			fmt.Fprintf(os.Stderr, "misplace: %v\n", err)
			os.Exit(1)
		}
		literal, err := misplaceBundle(bundle, o)
		if err != nil {
			fmt.Fprintf(os.Stderr, "misplace: %v\n", err)
			os.Exit(1)
		}
		if literal {
			args = withoutSystemd(args)
		}
	}
	runc, err := realRunc()
	if err != nil {
		fmt.Fprintf(os.Stderr, "misplace: %v\n", err)
		os.Exit(1)
	}
	err = syscall.Exec(runc, append([]string{"runc"}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "misplace: exec %s: %v\n", runc, err)
	os.Exit(1)
}
