package systemd_test

import (
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

// TestSystemdScopeCarriesLimits: a scope started for an adopted container
// (Grant.StartScope) gets the runtime's weight and limits as its unit
// properties, so systemd writes them into the scope's cgroup and keeps
// them there through a daemon-reload: cpu.weight, cpu.max (the quota per
// second at the period given), memory.max and pids.max read back as the
// runtime had them.
func TestSystemdScopeCarriesLimits(t *testing.T) {
	tree := realtest.NewSystemdTree(t)
	pod := tree.PodSlice("5f3c1e2a-0000-4000-8000-000000000003")
	cmd := exec.Command("sleep", "3600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	bus, err := systemd.Open(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	s := systemd.Scope{Unit: "cri-containerd-" + strings.Repeat("c3", 32) + ".scope", Slice: pod,
		Limits: systemd.Limits{CPUWeight: 8, CPUQuotaPerSecUSec: 250000, CPUQuotaPeriodUSec: 50000, MemoryMax: 64 << 20, TasksMax: 50}}
	if err := bus.GrantScopes([]systemd.Scope{s}).StartScope(s, []int{cmd.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	dir := path.Join("/sys/fs/cgroup", tree.CgroupOf(pod), s.Unit)
	want := map[string]string{"cpu.weight": "8", "cpu.max": "12500 50000", "memory.max": "67108864", "pids.max": "50"}
	check := func(when string) {
		t.Helper()
		procs, _ := os.ReadFile(path.Join(dir, "cgroup.procs"))
		if !strings.Contains(" "+strings.Join(strings.Fields(string(procs)), " ")+" ", " "+strconv.Itoa(cmd.Process.Pid)+" ") {
			t.Errorf("%s: the process is not in %s (%q)", when, dir, procs)
		}
		for f, v := range want {
			b, err := os.ReadFile(path.Join(dir, f))
			if got := strings.TrimSpace(string(b)); err != nil || got != v {
				t.Errorf("%s: %s/%s = %q (%v), want %q", when, s.Unit, f, got, err, v)
			}
		}
	}
	check("started")
	tree.Reload()
	check("after a daemon-reload")
}
