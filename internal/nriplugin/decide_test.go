package nriplugin

import (
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

const (
	uid = "0f6d4d5e-1c9a-4c7e-9a59-0d3c4f2a8b11"
	cid = "5b1e0c3f9a7d4e2b8c6a1f0e3d5c7b9a2e4f6a8c0b1d3e5f7a9c1b3d5e7f9a0b"
)

func listed(hs ...string) func(string) bool {
	return func(h string) bool { return slices.Contains(hs, h) }
}

// pod is a PodSandbox as containerd 2.x sends it: parent is what the
// kubelet gave as the sandbox's cgroup parent.
func pod(handler, parent string) *api.PodSandbox {
	return &api.PodSandbox{Id: "sb", Name: "web", Namespace: "apps", Uid: uid, RuntimeHandler: handler,
		Linux: &api.LinuxPodSandbox{CgroupParent: parent}}
}

func ctr(path string) *api.Container {
	return &api.Container{Id: cid, Name: "app", Linux: &api.LinuxContainer{CgroupsPath: path}}
}

func TestDecide(t *testing.T) {
	systemdSlice := "kubepods-besteffort-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
	systemdDir := "/kubepods.slice/kubepods-besteffort.slice/" + systemdSlice
	for _, c := range []struct {
		name        string
		handler     string
		listDefault bool
		parent      string
		from        string
		runtime     string
		wantPlace   bool
		wantTo      string
		wantErr     string
	}{
		{name: "seed 003: systemd node, spin shim", handler: "spin", parent: systemdSlice, from: systemdSlice + ":cri-containerd:" + cid, runtime: "containerd",
			wantPlace: true, wantTo: systemdDir + "/cri-containerd-" + cid + ".scope"},
		{name: "seed 003: the kubelet v1.37's expanded slice path", handler: "spin", parent: systemdDir, from: systemdSlice + ":cri-containerd:" + cid, runtime: "containerd",
			wantPlace: true, wantTo: systemdDir + "/cri-containerd-" + cid + ".scope"},
		{name: "cgroupfs node: already right", handler: "spin", parent: "/kubepods/besteffort/pod" + uid, from: "/kubepods/besteffort/pod" + uid + "/" + cid, runtime: "containerd",
			wantPlace: true, wantTo: "/kubepods/besteffort/pod" + uid + "/" + cid},
		{name: "CRI-O names it crio-<id>", handler: "spin", parent: systemdSlice, from: systemdSlice + ":crio:" + cid, runtime: "crio",
			wantPlace: true, wantTo: systemdDir + "/crio-" + cid + ".scope"},
		{name: "runc is not listed", handler: "runc", parent: systemdSlice, from: systemdSlice + ":cri-containerd:" + cid, runtime: "containerd"},
		{name: "default handler (runtime too old to say)", handler: "", parent: systemdSlice, from: "x", runtime: "containerd"},
		{name: "default handler listed (--default-handler)", handler: "", listDefault: true, parent: systemdSlice, from: systemdSlice + ":cri-containerd:" + cid, runtime: "containerd",
			wantPlace: true, wantTo: systemdDir + "/cri-containerd-" + cid + ".scope"},
		{name: "no cgroup parent", handler: "spin", parent: "", from: "x", runtime: "containerd", wantErr: "no cgroup parent"},
		{name: "unknown runtime on systemd", handler: "spin", parent: systemdSlice, from: "x", runtime: "", wantErr: "no known container cgroup name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hs := []string{"spin", "slight"}
			if c.listDefault {
				hs = append(hs, "")
			}
			d := Decide(listed(hs...), c.runtime, pod(c.handler, c.parent), ctr(c.from))
			if d.Handler != c.handler {
				t.Errorf("handler %q, want %q", d.Handler, c.handler)
			}
			if c.wantErr != "" {
				if d.Err == nil || !strings.Contains(d.Err.Error(), c.wantErr) || d.Place {
					t.Fatalf("decision %+v, want an error with %q and no placing", d, c.wantErr)
				}
				return
			}
			if d.Err != nil || d.Place != c.wantPlace || d.To != c.wantTo {
				t.Fatalf("decision %+v, want place=%v to=%q", d, c.wantPlace, c.wantTo)
			}
			if d.Place && d.From != c.from {
				t.Errorf("from %q, want %q", d.From, c.from)
			}
		})
	}
}

func TestAdjustmentSetsPathAndAnnotation(t *testing.T) {
	d := Decision{Place: true, From: "a:b:c", To: "/kubepods/podx/" + cid}
	adj := d.Adjustment()
	if got := adj.GetLinux().GetCgroupsPath(); got != d.To {
		t.Errorf("adjusted cgroupsPath %q, want %q", got, d.To)
	}
	if got := adj.GetAnnotations()[Annotation]; got != d.To {
		t.Errorf("annotation %s = %q, want %q", Annotation, got, d.To)
	}
	if adj.GetLinux().GetResources() != nil || len(adj.GetMounts()) > 0 || len(adj.GetEnv()) > 0 || len(adj.GetAnnotations()) != 1 {
		t.Errorf("the adjustment sets more than the path: %+v", adj)
	}
}
