package kubelettree

import (
	"strconv"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// memory records what a tree made: directories in order, file contents.
type memory struct {
	dirs  []string
	files map[string]string
}

func (m *memory) Mkdir(rel string) error { m.dirs = append(m.dirs, rel); return nil }
func (m *memory) Write(rel, file, value string) error {
	m.files[rel+"/"+file] = value
	return nil
}

// classify reads rel (relative to a scratch at the top) as the scanner
// does.
func classify(rel string) layout.Identity {
	id := layout.Root()
	for _, name := range strings.Split(rel, "/") {
		id = layout.Child(id, name)
	}
	return id
}

// TestTreeReadsBack: under both drivers, every cgroup a tree makes reads
// back through layout as what it was made for, and the weights are the
// kubelet's.
func TestTreeReadsBack(t *testing.T) {
	for _, d := range []layout.Driver{layout.Cgroupfs, layout.Systemd} {
		for _, v2 := range []bool{false, true} {
			n, err := NamesFor(d)
			if err != nil {
				t.Fatal(err)
			}
			m := &memory{files: map[string]string{}}
			tree := Tree{Names: n, V2: v2, C: m}
			if err := tree.BuildKube(500); err != nil {
				t.Fatal(err)
			}
			var pods []Pod
			for _, c := range []struct {
				qos   string
				milli int64
			}{{layout.Guaranteed, 1000}, {layout.Burstable, 500}, {layout.BestEffort, 0}} {
				p, err := n.NewPod("p-"+c.qos, c.qos, c.milli)
				if err != nil {
					t.Fatal(err)
				}
				if err := tree.BuildPod(p, fairness.MilliCPUToShares(c.milli)); err != nil {
					t.Fatal(err)
				}
				pods = append(pods, p)
			}
			for _, tier := range []string{n.Burstable, n.BestEffort} {
				if id := classify(tier); id.Kind != layout.QoSTier || id.Driver != d {
					t.Errorf("%s v2=%v: tier %s reads as %+v", d, v2, tier, id)
				}
			}
			for _, p := range pods {
				if id := classify(p.Rel); id.Kind != layout.Pod || id.PodUID != p.UID || id.QoS != p.QoS {
					t.Errorf("%s v2=%v: pod %s reads as %+v", d, v2, p.Rel, id)
				}
				id := classify(p.CtrRel)
				if id.Kind != layout.Container || id.PodUID != p.UID || id.ContainerID != p.ContainerID {
					t.Errorf("%s v2=%v: container %s reads as %+v", d, v2, p.CtrRel, id)
				}
				if d == layout.Systemd && id.Runtime != layout.RuntimeContainerd {
					t.Errorf("%s: container %s reads as runtime %q", d, p.CtrRel, id.Runtime)
				}
			}
			want := map[string]uint64{
				"":           fairness.MaxShares,
				n.Burstable:  fairness.MilliCPUToShares(500),
				n.BestEffort: fairness.MinShares,
				pods[0].Rel:  fairness.MilliCPUToShares(1000), pods[0].CtrRel: fairness.MilliCPUToShares(1000),
				pods[2].Rel: fairness.MinShares,
			}
			file := "cpu.shares"
			if v2 {
				file = "cpu.weight"
				for rel, s := range want {
					want[rel] = fairness.SharesToWeightLinear(s)
				}
				want[""] = fairness.MaxWeight
			}
			for rel, w := range want {
				if got := m.files[rel+"/"+file]; got != strconv.FormatUint(w, 10) {
					t.Errorf("%s v2=%v: %s/%s = %q, want %d", d, v2, rel, file, got, w)
				}
			}
		}
	}
	if _, err := NamesFor("openrc"); err == nil {
		t.Error("an unknown driver was named")
	}
}

// TestMetadata: the pods file's view of a tree: QoS, requests, the VM
// pods' declared size, and the containers matched by ID.
func TestMetadata(t *testing.T) {
	n, _ := NamesFor(layout.Cgroupfs)
	vm, _ := n.NewPod("vm-1", layout.BestEffort, 2000)
	g, _ := n.NewPod("app", layout.Guaranteed, 1000)
	set := metadata.NewSet(Metadata("demo", []Pod{vm}, g))
	pv, ok := set.ByContainer(vm.ContainerID)
	if !ok || pv.UID != vm.UID || pv.Annotation[vmsize.AnnotationCPU] != "2000m" || pv.QoS != layout.BestEffort || pv.Containers[0].ID != vm.ContainerID {
		t.Errorf("VM pod: %+v", pv)
	}
	pg, ok := set.Pod(g.UID)
	if !ok || *pg.RequestMilliCPU != 1000 || *pg.LimitMilliCPU != 1000 || pg.Namespace != "demo" {
		t.Errorf("Guaranteed pod: %+v", pg)
	}
}
