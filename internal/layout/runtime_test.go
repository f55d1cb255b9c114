package layout

import (
	"strings"
	"testing"
)

func TestContainerName(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for _, c := range []struct {
		d       Driver
		runtime string
		want    string
	}{
		{Systemd, "containerd", "cri-containerd-" + id + ".scope"},
		{Systemd, "crio", "crio-" + id + ".scope"},
		{Systemd, "docker", "docker-" + id + ".scope"},
		{Cgroupfs, "containerd", id},
		{Cgroupfs, "docker", id},
		{Cgroupfs, "crio", "crio-" + id},
		{Cgroupfs, "", id},
	} {
		got, err := ContainerName(c.d, c.runtime, id)
		if err != nil || got != c.want {
			t.Errorf("ContainerName(%s, %s) = %q, %v; want %q", c.d, c.runtime, got, err, c.want)
		}
	}
	for _, c := range []struct {
		d           Driver
		runtime, id string
	}{
		{Systemd, "kata", id}, {Systemd, "", id}, {Systemd, "containerd", "abc"}, {Systemd, "containerd", "../" + id[3:]}, {"", "containerd", id},
	} {
		if _, err := ContainerName(c.d, c.runtime, c.id); err == nil {
			t.Errorf("ContainerName(%q, %q, %q) accepted", c.d, c.runtime, c.id)
		}
	}
}

// TestRuntimeNamesRoundTrip: the name ContainerName gives reads back as
// the same runtime and ID (the two directions share one table), inside a
// pod and, for a scope, outside the kubelet's tree.
func TestRuntimeNamesRoundTrip(t *testing.T) {
	id := strings.Repeat("cd", 32)
	named := 0
	for _, r := range runtimes {
		name, err := ContainerName(Systemd, r.Name, id)
		if r.Sandbox {
			if err == nil {
				t.Errorf("%s: a sandbox runtime named a container %q", r.Name, name)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		named++
		got := classify("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_0000_4000_8000_00000000abcd.slice/" + name)
		if got.Kind != Container || got.Runtime != r.Name || got.ContainerID != id {
			t.Errorf("%s: %s reads back as %+v", r.Name, name, got)
		}
		got = classify("/system.slice/" + name)
		if got.Kind != Foreign || got.Shape != ShapeContainer || got.Runtime != r.Name || got.ContainerID != id {
			t.Errorf("%s: %s outside the kubelet's tree reads back as %+v", r.Name, name, got)
		}
	}
	if named != 3 {
		t.Errorf("%d runtimes name containers, want 3 (containerd, crio, docker)", named)
	}
}

// TestRuntimeNames: every form of a runtime's name, read by the table.
func TestRuntimeNames(t *testing.T) {
	pod := "/kubepods/besteffort/pod1234abcd-0000-4000-8000-00000000abcd/"
	id := strings.Repeat("ef", 32)
	for _, c := range []struct {
		form, in, want string
		read           func(string) string
	}{
		{"scheme", "containerd://" + id, RuntimeContainerd, RuntimeOfContainerID},
		{"scheme", "cri-o://" + id, RuntimeCRIO, RuntimeOfContainerID},
		{"scheme", "docker://" + id, RuntimeDocker, RuntimeOfContainerID},
		{"scheme", "containerd+wasm://" + id, "containerd+wasm", RuntimeOfContainerID}, // unknown: kept as it is
		{"scheme", id, "", RuntimeOfContainerID},
		{"NRI", "containerd", RuntimeContainerd, RuntimeOfNRI},
		{"NRI", "cri-o", RuntimeCRIO, RuntimeOfNRI},
		{"NRI", "crio", RuntimeCRIO, RuntimeOfNRI},
		{"NRI", "other", "", RuntimeOfNRI},
		{"NRI", "", "", RuntimeOfNRI},
		{"cgroup", pod + "cri-containerd-" + id + ".scope", RuntimeContainerd, nil},
		{"cgroup", pod + "crio-" + id + ".scope", RuntimeCRIO, nil},
		{"cgroup", pod + "cri-o-" + id, RuntimeCRIO, nil},
		{"cgroup", pod + "docker-" + id + ".scope", RuntimeDocker, nil},
		{"cgroup", pod + "crio-conmon-" + id + ".scope", RuntimeConmon, nil},
		{"cgroup", pod + "kata_" + id, RuntimeKata, nil},
		{"cgroup", "/kata_overhead", RuntimeKata, nil},
		{"cgroup", pod + id, "", nil}, // a bare ID: containerd or cri-dockerd
		// runwasi's literal directory (seed 003): containerd's prefix.
		{"cgroup", "/kubepods-besteffort-pod1234abcd_0000_4000_8000_00000000abcd.slice:cri-containerd:" + id, RuntimeContainerd, nil},
		{"cgroup", "/kubepods-besteffort-pod1234abcd_0000_4000_8000_00000000abcd.slice:youki:" + id, "youki", nil},
	} {
		var got string
		if c.read != nil {
			got = c.read(c.in)
		} else {
			got = classify(c.in).Runtime
		}
		if got != c.want {
			t.Errorf("%s %q: runtime %q, want %q", c.form, c.in, got, c.want)
		}
	}
}

// TestRuntimeTableUnique: no name of any form belongs to two runtimes
// (lookup would answer with whichever comes first).
func TestRuntimeTableUnique(t *testing.T) {
	forms := map[string]func(Runtime) []string{
		"name":   func(r Runtime) []string { return []string{r.Name} },
		"prefix": func(r Runtime) []string { return r.Prefixes },
		"scheme": func(r Runtime) []string { return r.Schemes },
		"NRI":    func(r Runtime) []string { return r.NRI },
	}
	for form, field := range forms {
		seen := map[string]string{}
		for _, r := range runtimes {
			for _, n := range field(r) {
				if n == "" {
					t.Errorf("%s: empty %s", r.Name, form)
				}
				if other, dup := seen[n]; dup {
					t.Errorf("%s %q belongs to %s and %s", form, n, other, r.Name)
				}
				seen[n] = r.Name
			}
		}
	}
}
