package layout

import (
	"strings"
	"testing"
)

// classify walks a full cgroup path from the hierarchy's root, as the
// inventory does, and returns the identity of its last element.
func classify(path string) Identity {
	id := Root()
	for _, name := range strings.Split(strings.Trim(path, "/"), "/") {
		if name == "" {
			continue
		}
		id = Child(id, name)
	}
	return id
}

// IDs and UIDs used below. The UID of seed 003's pod, the container ID
// from its literal directory; the others are made up in the same shapes.
const (
	uid   = "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c"
	uid_  = "99afd520_5b3e_4c8d_8471_4b6c8ee26b4c"
	cid   = "c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00"
	cid2  = "05b01919e2bced0c3c3d45f1065d500954fbf9e83205c5ccff00024b2e7d7821"
	uid2  = "0f3c4d2a-8b1e-4f6a-9c7d-2e5b8a1f0c3d"
	uid2_ = "0f3c4d2a_8b1e_4f6a_9c7d_2e5b8a1f0c3d"
	// Static (mirror) pods carry a 32-hex hash of the manifest as UID.
	static = "79c5176e2321b3741f55aee0036af2a9"
	// A Kata sandbox ID is a 64-hex CRI sandbox ID.
	sbx = "6a3f1e9b0c2d4e5f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f"
)

func TestChildLayouts(t *testing.T) {
	const (
		sysPod   = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid_ + ".slice"
		sysGuar  = "/kubepods.slice/kubepods-pod" + uid_ + ".slice"
		kindPod  = "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uid_ + ".slice"
		fsBurst  = "/kubepods/burstable/pod" + uid
		fsBest   = "/kubepods/besteffort/pod" + uid2
		fsGuar   = "/kubepods/pod" + uid
		literalG = "kubepods-pod" + uid_ + ".slice:cri-containerd:" + cid
	)
	cgroupfs := func(kind Kind, qos, podUID string) Identity {
		return Identity{Kind: kind, Driver: Cgroupfs, QoS: qos, PodUID: podUID}
	}
	systemd := func(kind Kind, qos, podUID string) Identity {
		return Identity{Kind: kind, Driver: Systemd, QoS: qos, PodUID: podUID}
	}
	ctr := func(base Identity, id, runtime string) Identity {
		base.Kind, base.ContainerID, base.Runtime = Container, id, runtime
		return base
	}
	with := func(base Identity, f func(*Identity)) Identity {
		f(&base)
		return base
	}
	nested := func(base Identity) Identity {
		base.Nested = true
		return base
	}
	tests := []struct {
		path string
		want Identity
	}{
		// Host cgroups.
		{"/", Root()},
		{"/system.slice", Identity{Kind: Host}},
		{"/system.slice/containerd.service", Identity{Kind: Host}},
		{"/user.slice/user-1000.slice/session-2.scope", Identity{Kind: Host}},

		// cgroupfs driver (DESIGN.md table; containerd/docker: 64-hex).
		{"/kubepods", Identity{Kind: KubeRoot, Driver: Cgroupfs}},
		{"/kubepods/burstable", cgroupfs(QoSTier, Burstable, "")},
		{"/kubepods/besteffort", cgroupfs(QoSTier, BestEffort, "")},
		{fsBurst, cgroupfs(Pod, Burstable, uid)},
		{fsBurst + "/" + cid, ctr(cgroupfs(Pod, Burstable, uid), cid, "")},
		{fsBest, cgroupfs(Pod, BestEffort, uid2)},
		{fsBest + "/" + cid2, ctr(cgroupfs(Pod, BestEffort, uid2), cid2, "")},
		{fsGuar, cgroupfs(Pod, Guaranteed, uid)},
		{fsGuar + "/" + cid, ctr(cgroupfs(Pod, Guaranteed, uid), cid, "")},
		// CRI-O on cgroupfs.
		{fsBurst + "/crio-" + cid, ctr(cgroupfs(Pod, Burstable, uid), cid, "crio")},
		{fsBurst + "/crio-conmon-" + cid, with(cgroupfs(Sandbox, Burstable, uid), func(i *Identity) { i.ContainerID, i.Runtime, i.Shape = cid, "conmon", ShapeConmon })},
		// Static pods: the 32-hex UID is kept as it is.
		{"/kubepods/burstable/pod" + static, cgroupfs(Pod, Burstable, static)},
		{"/kubepods/burstable/pod" + static + "/" + cid2, ctr(cgroupfs(Pod, Burstable, static), cid2, "")},

		// systemd driver.
		{"/kubepods.slice", Identity{Kind: KubeRoot, Driver: Systemd}},
		{"/kubepods.slice/kubepods-burstable.slice", systemd(QoSTier, Burstable, "")},
		{"/kubepods.slice/kubepods-besteffort.slice", systemd(QoSTier, BestEffort, "")},
		{sysPod, systemd(Pod, Burstable, uid)},
		{sysPod + "/cri-containerd-" + cid + ".scope", ctr(systemd(Pod, Burstable, uid), cid, "containerd")},
		{sysPod + "/crio-" + cid + ".scope", ctr(systemd(Pod, Burstable, uid), cid, "crio")},
		{sysPod + "/crio-conmon-" + cid + ".scope", with(systemd(Sandbox, Burstable, uid), func(i *Identity) { i.ContainerID, i.Runtime, i.Shape = cid, "conmon", ShapeConmon })},
		{sysPod + "/docker-" + cid + ".scope", ctr(systemd(Pod, Burstable, uid), cid, "docker")},
		{sysGuar, systemd(Pod, Guaranteed, uid)},
		{sysGuar + "/cri-containerd-" + cid2 + ".scope", ctr(systemd(Pod, Guaranteed, uid), cid2, "containerd")},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + static + ".slice", systemd(Pod, BestEffort, static)},

		// kind's --cgroup-root prefix.
		{"/kubelet.slice", Identity{Kind: Host}},
		{"/kubelet.slice/kubelet-kubepods.slice", Identity{Kind: KubeRoot, Driver: Systemd}},
		{"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice", systemd(QoSTier, BestEffort, "")},
		{kindPod, systemd(Pod, BestEffort, uid)},
		{kindPod + "/cri-containerd-" + cid + ".scope", ctr(systemd(Pod, BestEffort, uid), cid, "containerd")},

		// The literal cgroupsPath directory (seed 003): at the root, and
		// under containerd's own cgroup; both misplaced, UID with dashes.
		{"/" + literalG, Identity{Kind: Misplaced, Driver: Systemd, QoS: Guaranteed, PodUID: uid, ContainerID: cid, Runtime: "containerd", Shape: ShapeLiteralPath}},
		{"/system.slice/containerd.service/" + literalG, Identity{Kind: Misplaced, Driver: Systemd, QoS: Guaranteed, PodUID: uid, ContainerID: cid, Runtime: "containerd", Shape: ShapeLiteralPath}},
		{"/kubepods-burstable-pod" + uid2_ + ".slice:cri-containerd:" + cid2, Identity{Kind: Misplaced, Driver: Systemd, QoS: Burstable, PodUID: uid2, ContainerID: cid2, Runtime: "containerd", Shape: ShapeLiteralPath}},
		// ... relative to a QoS tier (a runtime resolving it against its parent).
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid2_ + ".slice:cri-containerd:" + cid2, Identity{Kind: Misplaced, Driver: Systemd, QoS: BestEffort, PodUID: uid2, ContainerID: cid2, Runtime: "containerd", Shape: ShapeLiteralPath}},
		// ... and what is below it is the same container.
		{"/" + literalG + "/sub", nested(Identity{Kind: Misplaced, Driver: Systemd, QoS: Guaranteed, PodUID: uid, ContainerID: cid, Runtime: "containerd", Shape: ShapeLiteralPath})},

		// Kata: the overhead cgroup at the root, sandbox cgroups beside the
		// pod (in the tier, sandbox_cgroup_only=false) and inside it.
		{"/kata_overhead", Identity{Kind: Sandbox, Runtime: "kata", Shape: ShapeKataOver}},
		{"/kata_overhead/" + sbx, nested(Identity{Kind: Sandbox, Runtime: "kata", Shape: ShapeKataOver})},
		{"/kata_" + sbx, Identity{Kind: Sandbox, Runtime: "kata", Shape: ShapeKata, ContainerID: sbx}},
		{"/kubepods/besteffort/kata_" + sbx, Identity{Kind: Sandbox, Runtime: "kata", Shape: ShapeKata, ContainerID: sbx}},
		{"/kubepods.slice/kata_" + sbx, Identity{Kind: Sandbox, Runtime: "kata", Shape: ShapeKata, ContainerID: sbx}},
		{fsBest + "/kata_" + sbx, with(cgroupfs(Sandbox, BestEffort, uid2), func(i *Identity) { i.Runtime, i.Shape, i.ContainerID = "kata", ShapeKata, sbx })},
		{sysPod + "/kata_" + sbx, with(systemd(Sandbox, Burstable, uid), func(i *Identity) { i.Runtime, i.Shape, i.ContainerID = "kata", ShapeKata, sbx })},

		// NeonVM: cgroups named for the pod (not its UID) outside kubepods.
		{"/compute-quiet-river-8f2k1-vm-runner", Identity{Kind: Escaped, Shape: ShapeVMRunner, PodName: "compute-quiet-river-8f2k1"}},
		{"/neonvm-qemu-compute-quiet-river-8f2k1", Identity{Kind: Escaped, Shape: ShapeNeonQEMU, PodName: "compute-quiet-river-8f2k1"}},
		{"/neonvm-qemu-compute-quiet-river-8f2k1/vcpu0", nested(Identity{Kind: Escaped, Shape: ShapeNeonQEMU, PodName: "compute-quiet-river-8f2k1"})},

		// A pod-named cgroup away from the pod (the whole pod slice
		// recreated at the root, or a container named with the pod).
		{"/kubepods-besteffort-pod" + uid2_ + ".slice", Identity{Kind: Misplaced, Shape: ShapePodOutside, PodUID: uid2}},

		// Container-shaped cgroups outside kubepods that name no pod:
		// foreign, with the container ID kept for a CRI or --pods lookup.
		{"/system.slice/cri-containerd-" + cid + ".scope", Identity{Kind: Foreign, Shape: ShapeContainer, ContainerID: cid, Runtime: "containerd"}},
		{"/system.slice/docker-" + cid2 + ".scope", Identity{Kind: Foreign, Shape: ShapeContainer, ContainerID: cid2, Runtime: "docker"}},
		{"/cri-containerd-" + cid + ".scope", Identity{Kind: Foreign, Shape: ShapeContainer, ContainerID: cid, Runtime: "containerd"}},

		// Unknown shapes inside the kubelet's tree: foreign, never guessed.
		{"/kubepods/whatever", Identity{Kind: Foreign, Driver: Cgroupfs, Shape: ShapeUnknown}},
		{"/kubepods.slice/kubepods-burstable.slice/not-a-pod.slice", Identity{Kind: Foreign, Driver: Systemd, QoS: Burstable, Shape: ShapeUnknown}},
		{"/kubepods/burstable/pod" + uid + "-x", Identity{Kind: Foreign, Driver: Cgroupfs, QoS: Burstable, Shape: ShapeUnknown}},
		{"/kubepods/burstable/pod" + uid_, Identity{Kind: Foreign, Driver: Cgroupfs, QoS: Burstable, Shape: ShapeUnknown}}, // cgroupfs uses dashes
		{fsBurst + "/helper", cgroupfs(Foreign, Burstable, uid).withShape(ShapeUnknown)},
		{fsBurst + "/" + cid[:63], cgroupfs(Foreign, Burstable, uid).withShape(ShapeUnknown)}, // 63 hex
		{sysPod + "/cri-containerd-" + strings.ToUpper(cid) + ".scope", systemd(Foreign, Burstable, uid).withShape(ShapeUnknown)},
		{fsBurst + "/helper/deeper", nested(cgroupfs(Foreign, Burstable, uid).withShape(ShapeUnknown))},
		{"/kubepods/whatever/pod" + uid, nested(Identity{Kind: Foreign, Driver: Cgroupfs, Shape: ShapeUnknown})},

		// Nested cgroups under a container (systemd-in-container, crun's
		// "container" sub-cgroup): the same identity, Nested.
		{sysPod + "/crio-" + cid + ".scope/container", nested(ctr(systemd(Pod, Burstable, uid), cid, "crio"))},
		{fsBurst + "/" + cid + "/init.scope/x", nested(ctr(cgroupfs(Pod, Burstable, uid), cid, ""))},
		// A pod-looking name below a container is still that container.
		{fsBurst + "/" + cid + "/pod" + uid2, nested(ctr(cgroupfs(Pod, Burstable, uid), cid, ""))},
	}
	for _, tc := range tests {
		got := classify(tc.path)
		if got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.path, got, tc.want)
		}
	}
}

func (id Identity) withShape(s string) Identity {
	id.Shape = s
	return id
}

func TestNormalizeUID(t *testing.T) {
	if got := NormalizeUID(uid_); got != uid {
		t.Errorf("NormalizeUID(%q) = %q", uid_, got)
	}
	if got := NormalizeUID(static); got != static {
		t.Errorf("NormalizeUID(%q) = %q", static, got)
	}
}

func TestIsContainerLike(t *testing.T) {
	for k, want := range map[Kind]bool{
		Host: false, KubeRoot: false, QoSTier: false, Pod: false, Foreign: false,
		Container: true, Sandbox: true, Misplaced: true, Escaped: true,
	} {
		if got := (Identity{Kind: k}).IsContainerLike(); got != want {
			t.Errorf("%s: IsContainerLike = %v, want %v", k, got, want)
		}
	}
}

// FuzzChild walks random paths: no panic, a known kind, and nesting is
// sticky (below a container-like or foreign cgroup everything is Nested).
func FuzzChild(f *testing.F) {
	f.Add("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid_ + ".slice/cri-containerd-" + cid + ".scope/x")
	f.Add("/kubepods-pod" + uid_ + ".slice:cri-containerd:" + cid)
	f.Add("/kubepods/besteffort/pod" + uid2 + "/" + cid2)
	f.Add("/kata_overhead/a/b")
	f.Fuzz(func(t *testing.T, p string) {
		id := Root()
		stuck := false
		for _, name := range strings.Split(p, "/") {
			if name == "" {
				continue
			}
			id = Child(id, name)
			switch id.Kind {
			case Host, KubeRoot, QoSTier, Pod, Container, Sandbox, Misplaced, Escaped, Foreign:
			default:
				t.Fatalf("%q: unknown kind %q", p, id.Kind)
			}
			if stuck && !id.Nested {
				t.Fatalf("%q: %q left a container's subtree: %+v", p, name, id)
			}
			stuck = id.Nested || id.IsContainerLike() || id.Kind == Foreign
		}
	})
}
