package layout_test

import (
	"fmt"
	"strings"

	"github.com/cgwarden/cgwarden/internal/layout"
)

// Child is one step of the walk: the identity of a cgroup follows from its
// parent's and its own name, so a path is classified one name at a time,
// from the hierarchy's root down.
func ExampleChild() {
	path := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_0000_4000_8000_00000000abcd.slice/cri-containerd-" + strings.Repeat("ab", 32) + ".scope"
	id := layout.Root()
	for _, name := range strings.Split(strings.Trim(path, "/"), "/") {
		id = layout.Child(id, name)
		fmt.Printf("%-9s qos=%-9s pod=%s\n", id.Kind, id.QoS, id.PodUID)
	}
	fmt.Println("runtime:", id.Runtime, "driver:", id.Driver)
	// Output:
	// kubepods  qos=          pod=
	// qos       qos=burstable pod=
	// pod       qos=burstable pod=1234abcd-0000-4000-8000-00000000abcd
	// container qos=burstable pod=1234abcd-0000-4000-8000-00000000abcd
	// runtime: containerd driver: systemd
}

// A container cgroup a runtime made beside its pod rather than inside it
// (seed 003's literal "<slice>:cri-containerd:<id>" directory) is told
// apart by its shape.
func ExampleChild_misplaced() {
	name := "kubepods-burstable-pod1234abcd_0000_4000_8000_00000000abcd.slice:cri-containerd:" + strings.Repeat("cd", 32)
	id := layout.Child(layout.Root(), name)
	fmt.Println(id.Kind, id.Shape, id.PodUID, id.Runtime)
	// Output:
	// misplaced literal-cgroups-path 1234abcd-0000-4000-8000-00000000abcd containerd
}

// ContainerName is the inverse direction: the name the kubelet's layout
// gives a container's cgroup.
func ExampleContainerName() {
	id := strings.Repeat("ef", 32)
	for _, c := range []struct {
		d       layout.Driver
		runtime string
	}{{layout.Systemd, "containerd"}, {layout.Systemd, "crio"}, {layout.Cgroupfs, "crio"}, {layout.Cgroupfs, "containerd"}} {
		name, _ := layout.ContainerName(c.d, c.runtime, id)
		fmt.Printf("%s %s: %s\n", c.d, c.runtime, strings.Replace(name, id, "<id>", 1))
	}
	// Output:
	// systemd containerd: cri-containerd-<id>.scope
	// systemd crio: crio-<id>.scope
	// cgroupfs crio: crio-<id>
	// cgroupfs containerd: <id>
}
