package realtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

// EnvRequireSystemd names the variable that turns "no systemd here" into a
// failure. Only the systemd guest sets it (scripts/vmtest --systemd, whose
// test unit runs with CGWARDEN_REQUIRE_SYSTEMD=1): CGWARDEN_REQUIRE_REAL=1
// alone does not, because the host lane and the busybox guest have a real
// kernel but no systemd, and they are not supposed to.
const EnvRequireSystemd = "CGWARDEN_REQUIRE_SYSTEMD"

// SystemdBusSocket is where the system bus listens on a systemd node.
const SystemdBusSocket = "/run/dbus/system_bus_socket"

// RequireSystemd is Require, and then skips t (fails it under
// CGWARDEN_REQUIRE_SYSTEMD=1) unless systemd is PID 1 (sd_booted(3):
// /run/systemd/system is a directory), the system bus is there and the
// cgroup filesystem is pure v2: the node a current distribution boots.
func RequireSystemd(t testing.TB) {
	t.Helper()
	Require(t)
	why := systemdUnusable()
	if why == "" {
		return
	}
	if os.Getenv(EnvRequireSystemd) == "1" {
		t.Fatalf("systemd test cannot run (%s) and %s=1", why, EnvRequireSystemd)
	}
	t.Skipf("systemd test skipped: %s; it runs in the systemd guest (scripts/vmtest --systemd), where %s=1 makes this a failure", why, EnvRequireSystemd)
}

func systemdUnusable() string {
	if fi, err := os.Stat("/run/systemd/system"); err != nil || !fi.IsDir() {
		return "systemd is not PID 1 (no /run/systemd/system)"
	}
	if comm, err := os.ReadFile("/proc/1/comm"); err != nil || strings.TrimSpace(string(comm)) != "systemd" {
		return "PID 1 is not systemd"
	}
	if _, err := os.Stat(SystemdBusSocket); err != nil {
		return "no system bus: " + err.Error()
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		return "/sys/fs/cgroup is not a pure cgroup v2 mount"
	}
	return ""
}

// SystemdTree is a kubelet-shaped tree of transient systemd units that a
// test creates and always stops, made the way the kubelet's systemd cgroup
// driver (runc's libcontainer/cgroups/systemd) makes its own:
//
//	<prefix>.slice/<prefix>-kubepods.slice/<prefix>-kubepods-besteffort.slice/
//	    <prefix>-kubepods-besteffort-pod<uid>.slice/cri-containerd-<id>.scope
//
// The prefix is unique per test ("cgwt" and 8 hex digits; the layout
// recognises a prefixed kubepods.slice, as kind and k3s nest theirs), so
// the tree never touches a real kubelet's kubepods.slice.
type SystemdTree struct {
	t    testing.TB
	Conn *sd.Conn
	// Prefix names the tree's top slice, <Prefix>.slice.
	Prefix string
	units  []string          // started, in order
	scopes map[string]string // scope → its slice
	procs  []*exec.Cmd
}

// NewSystemdTree creates <prefix>.slice, <prefix>-kubepods.slice and the
// BestEffort tier <prefix>-kubepods-besteffort.slice (CPUWeight 1: the
// kubelet's cpu.shares 2, converted as runc converts it). It calls
// RequireSystemd first.
func NewSystemdTree(t testing.TB) *SystemdTree {
	t.Helper()
	RequireSystemd(t)
	// The connection lives as long as its context: the test's.
	conn, err := sd.NewSystemConnectionContext(context.Background())
	if err != nil {
		t.Fatalf("connecting to systemd: %v", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	s := &SystemdTree{t: t, Conn: conn, Prefix: "cgwt" + hex.EncodeToString(b[:]), scopes: map[string]string{}}
	t.Cleanup(s.cleanup)
	s.Slice(s.Prefix+".slice", "-.slice")
	s.Slice(s.Kubepods(), s.Prefix+".slice")
	s.Slice(s.Tier(), s.Kubepods(), sd.Property{Name: "CPUWeight", Value: godbus.MakeVariant(uint64(1))})
	return s
}

// Kubepods is the tree's kubelet root unit.
func (s *SystemdTree) Kubepods() string { return s.Prefix + "-kubepods.slice" }

// Tier is the tree's BestEffort tier unit.
func (s *SystemdTree) Tier() string { return s.Prefix + "-kubepods-besteffort.slice" }

// Root is the tree's top cgroup (/<prefix>.slice): the scan's Base.
func (s *SystemdTree) Root() string { return "/" + s.Prefix + ".slice" }

// CgroupOf is the cgroup path of a unit of the tree, as systemd places it:
// a slice by its name (every dash is a level), a scope in its slice.
func (s *SystemdTree) CgroupOf(unit string) string {
	if slice, ok := s.scopes[unit]; ok {
		return s.CgroupOf(slice) + "/" + unit
	}
	var out string
	parts := strings.Split(strings.TrimSuffix(unit, ".slice"), "-")
	for i := range parts {
		out += "/" + strings.Join(parts[:i+1], "-") + ".slice"
	}
	return out
}

// Slice starts a transient slice as the kubelet's driver does: Wants= its
// parent, no default dependencies, accounting on, and the given resource
// properties.
func (s *SystemdTree) Slice(unit, parent string, props ...sd.Property) {
	s.t.Helper()
	p := []sd.Property{
		sd.PropDescription("libcontainer container " + unit),
		sd.PropWants(parent),
		{Name: "DefaultDependencies", Value: godbus.MakeVariant(false)},
		{Name: "MemoryAccounting", Value: godbus.MakeVariant(true)},
		{Name: "CPUAccounting", Value: godbus.MakeVariant(true)},
		{Name: "TasksAccounting", Value: godbus.MakeVariant(true)},
	}
	s.start(unit, append(p, props...))
}

// PodSlice starts a BestEffort pod's slice in the tree's tier, with the
// CPUWeight the kubelet gives it (1), and returns the unit.
func (s *SystemdTree) PodSlice(uid string) string {
	s.t.Helper()
	unit := s.Prefix + "-kubepods-besteffort-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
	s.Slice(unit, s.Tier(), sd.Property{Name: "CPUWeight", Value: godbus.MakeVariant(uint64(1))})
	return unit
}

// Scope starts a container's scope (cri-containerd-<id>.scope) in slice
// with a process of its own (sleep), as runc's systemd driver does:
// Slice=, Delegate=yes, the process's PID, CPUWeight 1. It returns the
// scope unit and the process.
func (s *SystemdTree) Scope(slice, id string) (string, *exec.Cmd) {
	s.t.Helper()
	cmd := exec.Command("sleep", "3600")
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting a container process: %v", err)
	}
	s.procs = append(s.procs, cmd)
	unit := "cri-containerd-" + id + ".scope"
	s.scopes[unit] = slice
	s.start(unit, []sd.Property{
		sd.PropDescription("libcontainer container " + id),
		sd.PropSlice(slice),
		{Name: "Delegate", Value: godbus.MakeVariant(true)},
		{Name: "MemoryAccounting", Value: godbus.MakeVariant(true)},
		{Name: "CPUAccounting", Value: godbus.MakeVariant(true)},
		{Name: "TasksAccounting", Value: godbus.MakeVariant(true)},
		{Name: "DefaultDependencies", Value: godbus.MakeVariant(false)},
		sd.PropPids(uint32(cmd.Process.Pid)),
		{Name: "CPUWeight", Value: godbus.MakeVariant(uint64(1))},
	})
	return unit, cmd
}

func (s *SystemdTree) start(unit string, props []sd.Property) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ch := make(chan string, 1)
	if _, err := s.Conn.StartTransientUnitContext(ctx, unit, "replace", props, ch); err != nil {
		s.t.Fatalf("starting transient unit %s: %v", unit, err)
	}
	s.units = append(s.units, unit)
	select {
	case r := <-ch:
		if r != "done" {
			s.t.Fatalf("starting transient unit %s: job %s", unit, r)
		}
	case <-ctx.Done():
		s.t.Fatalf("starting transient unit %s: no answer in 60s", unit)
	}
}

// Reload is `systemctl daemon-reload`: systemd reloads every unit and
// realizes their cgroups again.
func (s *SystemdTree) Reload() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := s.Conn.ReloadContext(ctx); err != nil {
		s.t.Fatalf("daemon-reload: %v", err)
	}
}

// cleanup stops every unit the tree started, newest first, and kills the
// processes it started.
func (s *SystemdTree) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := len(s.units) - 1; i >= 0; i-- {
		ch := make(chan string, 1)
		if _, err := s.Conn.StopUnitContext(ctx, s.units[i], "replace", ch); err != nil {
			s.t.Logf("cleanup: stopping %s: %v", s.units[i], err)
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	for _, c := range s.procs {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	s.Conn.Close()
}
