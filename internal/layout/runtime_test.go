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
// the same runtime and ID (the two directions share one table).
func TestRuntimeNamesRoundTrip(t *testing.T) {
	id := strings.Repeat("cd", 32)
	for rt := range runtimePrefix {
		name, err := ContainerName(Systemd, rt, id)
		if err != nil {
			t.Fatal(err)
		}
		got := classify("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_0000_4000_8000_00000000abcd.slice/" + name)
		if got.Runtime != rt || got.ContainerID != id {
			t.Errorf("%s: %s reads back as runtime %q, ID %q", rt, name, got.Runtime, got.ContainerID)
		}
	}
}
