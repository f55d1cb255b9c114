package inspect

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// A kubelet run with --cgroup-root (kind: /kubelet.slice/kubelet-kubepods.slice)
// puts the kubelet's tree below a host cgroup, and a runtime may put a
// misplaced container deep in its own service's cgroup. The text view must
// still show the kubelet's tree and the misplaced cgroup where it really
// is, without unfolding unrelated host cgroups.
func TestWriteTextShowsTreesBelowHostCgroups(t *testing.T) {
	const (
		cpu  = "/sys/fs/cgroup/cpu"
		uid_ = "99afd520_5b3e_4c8d_8471_4b6c8ee26b4c"
		cid  = "c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00"
		pod  = "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uid_ + ".slice"
		lit  = "/system.slice/containerd.service/kubelet-kubepods-besteffort-pod" + uid_ + ".slice:cri-containerd:" + cid
	)
	var b strings.Builder
	b.WriteString("cgwarden snapshot v1\n")
	b.WriteString("-- /proc/self/mountinfo --\n32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n")
	b.WriteString("-- /sys/devices/system/cpu/online --\n0-3\n")
	for _, d := range []string{
		"/kubelet.slice", "/kubelet.slice/kubelet-kubepods.slice", "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice",
		pod, "/system.slice", "/system.slice/sshd.service", "/system.slice/containerd.service", lit,
	} {
		b.WriteString("-- " + cpu + d + "/cpu.shares --\n1024\n")
	}
	s, err := snapshot.Load(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := inventory.Open(s.Samples[0].FS)
	if err != nil {
		t.Fatal(err)
	}
	n, err := sc.Scan(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteText(&out, n, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"kubelet-kubepods.slice ", "kubelet-kubepods-besteffort.slice ", "kubelet-kubepods-besteffort-pod" + uid_ + ".slice ",
		MisplacedMarker + " c339025b3f0d… at /system.slice/containerd.service/kubelet-kubepods-besteffort-pod" + uid_ + ".slice:cri-containerd:c339025b3f0d… ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in\n%s", want, text)
		}
	}
	// The misplaced container appears once: under its pod, with where it
	// really is; not again in the runtime's service cgroup.
	if c := strings.Count(text, ":cri-containerd:c339025b3f0d…"); c != 1 {
		t.Errorf("the misplaced cgroup appears %d times:\n%s", c, text)
	}
	if strings.Contains(text, "sshd.service") {
		t.Errorf("an unrelated host cgroup below the first level is unfolded:\n%s", text)
	}
}

// A container cgroup that names no known pod (a runtime's scope under
// system.slice, without pod metadata) appears once, in the tree, marked;
// the note after the table counts it without listing it again.
func TestWriteTextUnattachedOnce(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	var b strings.Builder
	b.WriteString("cgwarden snapshot v1\n")
	b.WriteString("-- /proc/self/mountinfo --\n35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	b.WriteString("-- /sys/devices/system/cpu/online --\n0-1\n")
	for _, d := range []string{"/kubepods.slice", "/system.slice", "/system.slice/cri-containerd-" + id + ".scope"} {
		b.WriteString("-- /sys/fs/cgroup" + d + "/cpu.weight --\n100\n")
	}
	s, err := snapshot.Load(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := inventory.Open(s.Samples[0].FS)
	if err != nil {
		t.Fatal(err)
	}
	n, err := sc.Scan(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Unattached) != 1 {
		t.Fatalf("unattached: %d, want 1", len(n.Unattached))
	}
	var out bytes.Buffer
	if err := WriteText(&out, n, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if c := strings.Count(text, "cri-containerd-0123456789ab"); c != 1 {
		t.Errorf("the unattached cgroup appears %d times:\n%s", c, text)
	}
	if !strings.Contains(text, NoKnownPod) || !strings.Contains(text, "1 cgroup marked \""+NoKnownPod+"\" above looks like") {
		t.Errorf("the unattached cgroup is not marked and counted:\n%s", text)
	}
}

func TestIsSandbox(t *testing.T) {
	app := &inventory.Container{ID: "a", Name: "app"}
	pause := &inventory.Container{ID: "p"}
	kata := &inventory.Container{ID: "k", Sandbox: true}
	restarted := &inventory.Container{ID: "r"}
	for _, c := range []struct {
		what string
		pod  *inventory.Pod
		ctr  *inventory.Container
		want bool
	}{
		{"the one unnamed cgroup of a named pod", &inventory.Pod{Name: "web", Containers: []*inventory.Container{app, pause}}, pause, true},
		{"a named container", &inventory.Pod{Name: "web", Containers: []*inventory.Container{app, pause}}, app, false},
		{"a pod without metadata", &inventory.Pod{Containers: []*inventory.Container{app, pause}}, pause, false},
		{"two unnamed: metadata older than a restart", &inventory.Pod{Name: "web", Containers: []*inventory.Container{pause, restarted}}, pause, false},
		{"the inventory's own sandbox", &inventory.Pod{Containers: []*inventory.Container{kata}}, kata, true},
	} {
		if got := IsSandbox(c.pod, c.ctr); got != c.want {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
	}
}
