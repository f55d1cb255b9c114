package layout

import (
	"strings"
	"testing"
)

func TestPodCgroup(t *testing.T) {
	for _, c := range []struct {
		parent, want string
		driver       Driver
		err          string
	}{
		// The lane's kubelet (cgroupfs driver), as containerd receives it.
		{parent: "/kubepods/besteffort/pod0f6d4d5e-1c9a-4c7e-9a59-0d3c4f2a8b11", want: "/kubepods/besteffort/pod0f6d4d5e-1c9a-4c7e-9a59-0d3c4f2a8b11", driver: Cgroupfs},
		// The kubelet v1.37 with the systemd driver hands the expanded
		// slice path (the systemd node guest's containerd 2.4 passes it
		// on to NRI so).
		{parent: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod84e060ec0cbd0c3ef04e1f75e1db1963.slice", want: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod84e060ec0cbd0c3ef04e1f75e1db1963.slice", driver: Systemd},
		{parent: "/kubepods.slice/kubepods-pod84e060ec0cbd0c3ef04e1f75e1db1963.slice", want: "/kubepods.slice/kubepods-pod84e060ec0cbd0c3ef04e1f75e1db1963.slice", driver: Systemd},
		{parent: "/kubepods.slice/kubepods-besteffort-podx.slice", err: "whose directory is /kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podx.slice"},
		{parent: "/kubepods/a--b.slice", err: "not a systemd slice name"},
		// Or the slice's bare name.
		{parent: "kubepods-besteffort-pod0f6d4d5e_1c9a_4c7e_9a59_0d3c4f2a8b11.slice", want: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0f6d4d5e_1c9a_4c7e_9a59_0d3c4f2a8b11.slice", driver: Systemd},
		// Guaranteed, and a --cgroup-root prefix (kind).
		{parent: "kubepods-pod0f6d4d5e_1c9a_4c7e_9a59_0d3c4f2a8b11.slice", want: "/kubepods.slice/kubepods-pod0f6d4d5e_1c9a_4c7e_9a59_0d3c4f2a8b11.slice", driver: Systemd},
		{parent: "kubelet-kubepods-burstable-podx.slice", want: "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-podx.slice", driver: Systemd},
		{parent: "", err: "no cgroup parent"},
		{parent: "/", err: "not a clean path"},
		{parent: "/kubepods/../x", err: "not a clean path"},
		{parent: "kubepods/besteffort", err: "neither"},
		{parent: "a--b.slice", err: "not a systemd slice name"},
		{parent: "-a.slice", err: "not a systemd slice name"},
		{parent: "a/b.slice", err: "not a systemd slice name"},
	} {
		got, d, err := PodCgroup(c.parent)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("PodCgroup(%q) = %q, %v; want error with %q", c.parent, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want || d != c.driver {
			t.Errorf("PodCgroup(%q) = %q, %q, %v; want %q, %q", c.parent, got, d, err, c.want, c.driver)
		}
	}
}

func TestSliceDirRoot(t *testing.T) {
	if got, err := SliceDir("-.slice"); err != nil || got != "/" {
		t.Errorf("SliceDir(-.slice) = %q, %v; want /", got, err)
	}
}

func TestContainerPath(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for _, c := range []struct {
		d       Driver
		runtime string
		pod     string
		want    string
	}{
		{Cgroupfs, "containerd", "/kubepods/besteffort/podu", "/kubepods/besteffort/podu/" + id},
		{Cgroupfs, "crio", "/kubepods/podu", "/kubepods/podu/crio-" + id},
		{Systemd, "containerd", "/kubepods.slice/kubepods-podu.slice", "/kubepods.slice/kubepods-podu.slice/cri-containerd-" + id + ".scope"},
	} {
		got, err := ContainerPath(c.d, c.runtime, c.pod, id)
		if err != nil || got != c.want {
			t.Errorf("ContainerPath(%s, %s, %s) = %q, %v; want %q", c.d, c.runtime, c.pod, got, err, c.want)
		}
	}
	if _, err := ContainerPath(Systemd, "containerd", "/x", "short"); err == nil {
		t.Error("a short container ID gave a path")
	}
}

// FuzzPodCgroup: any parent gives a clean absolute path below the root,
// or an error; never a panic.
func FuzzPodCgroup(f *testing.F) {
	for _, s := range []string{"/kubepods/besteffort/podx", "kubepods-besteffort-podx.slice", "-.slice", "a--b.slice", "", "/", "x.slice/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, parent string) {
		got, d, err := PodCgroup(parent)
		if err != nil {
			return
		}
		if !strings.HasPrefix(got, "/") || strings.Contains(got, "//") || strings.Contains(got, "/../") || strings.HasSuffix(got, "/..") {
			t.Fatalf("PodCgroup(%q) = %q: not a clean absolute path", parent, got)
		}
		if d != Cgroupfs && d != Systemd {
			t.Fatalf("PodCgroup(%q): driver %q", parent, d)
		}
	})
}
