package systemd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

// The agent role: the test binary re-executed as the fix-mode agent runs
// in a container on a cgroup v2 node (containerd 2.x, not privileged):
// uid 0 with no capability, no_new_privs, the host's PID namespace, and
// (with envAgentNS=1) a cgroup namespace of its own whose root is the
// cgroup it was started in, as the runtime makes one for every container
// that is not privileged. It runs the steps it is given and prints what
// each did, as JSON, on stdout.
const (
	roleAgent = "agent"
	// envAgentNS is "1" for a private cgroup namespace, "0" for the host's.
	envAgentNS = "CGWARDEN_SYSTEMD_TEST_CGNS"
	// envAgentSteps is the JSON []agentStep to run.
	envAgentSteps = "CGWARDEN_SYSTEMD_TEST_STEPS"
	// envAgentReady is set once the namespace and the capabilities are
	// set up, for the process image that runs the steps.
	envAgentReady = "CGWARDEN_SYSTEMD_TEST_READY"
	// envAgentHostRoot is a directory beneath which the agent, in a mount
	// namespace of its own, bind-mounts the host's /sys/fs/cgroup and
	// /proc, as the DaemonSet's hostPath volumes do at /host: every path
	// of a step is read and written beneath it.
	envAgentHostRoot = "CGWARDEN_SYSTEMD_TEST_HOST_ROOT"
)

// agentMounts are the host directories the agent sees beneath its host
// root (the DaemonSet's volumes that matter here).
var agentMounts = []string{"/sys/fs/cgroup", "/proc"}

// agentStep is one thing the agent tries.
type agentStep struct {
	// Op is read, write (Data into Path, as one write(2)), mkdir, rmdir,
	// find-self (the cgroup beneath the mount Path whose cgroup.procs
	// lists this process), start-scope (systemd.Grant.StartScope of Unit
	// in Slice with PIDs), attach (AttachProcessesToUnit of PIDs to Unit)
	// or set-property (systemd.Grant.SetProperty of Unit's CPUWeight to
	// Data).
	Op    string `json:"op"`
	Path  string `json:"path,omitempty"`
	Data  string `json:"data,omitempty"`
	Unit  string `json:"unit,omitempty"`
	Slice string `json:"slice,omitempty"`
	PIDs  []int  `json:"pids,omitempty"`
}

// agentResult is what a step did: its output, or the kernel's errno name
// (or systemd's D-Bus error name) and the whole error.
type agentResult struct {
	Out   string `json:"out,omitempty"`
	Errno string `json:"errno,omitempty"`
	Err   string `json:"err,omitempty"`
}

func agentChild() int {
	if os.Getenv(envAgentReady) == "" {
		// Namespaces and capabilities are a thread's: set them on this
		// thread, and exec from it, so that the whole new image has them.
		runtime.LockOSThread()
		if err := bindHost(os.Getenv(envAgentHostRoot)); err != nil {
			fmt.Fprintln(os.Stderr, "mounting the host:", err)
			return 3
		}
		if os.Getenv(envAgentNS) == "1" {
			if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
				fmt.Fprintln(os.Stderr, "unshare(CLONE_NEWCGROUP):", err)
				return 3
			}
		}
		if err := dropCapabilities(); err != nil {
			fmt.Fprintln(os.Stderr, "dropping capabilities:", err)
			return 3
		}
		exe, err := os.Executable()
		if err == nil {
			err = unix.Exec(exe, os.Args, append(os.Environ(), envAgentReady+"=1"))
		}
		fmt.Fprintln(os.Stderr, "exec:", err)
		return 3
	}
	var steps []agentStep
	if err := json.Unmarshal([]byte(os.Getenv(envAgentSteps)), &steps); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	out := make([]agentResult, len(steps))
	for i, s := range steps {
		out[i] = s.run()
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return 3
	}
	return 0
}

// bindHost makes a mount namespace for this thread and bind-mounts the
// host's agentMounts beneath root there, as a container runtime mounts
// hostPath volumes (the same superblocks, seen through other mounts).
func bindHost(root string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare(CLONE_NEWNS): %w", err)
	}
	if err := unix.Mount("none", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	for _, m := range agentMounts {
		if err := unix.Mount(m, filepath.Join(root, m), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind-mounting %s: %w", m, err)
		}
	}
	return nil
}

// dropCapabilities leaves this thread, and what it execs as uid 0, with no
// capability (a container's securityContext capabilities.drop [ALL]: an
// empty bounding set, nothing inheritable or ambient) and no_new_privs
// (allowPrivilegeEscalation: false, the DaemonSet's).
func dropCapabilities() error {
	raw, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return err
	}
	last, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("PR_CAPBSET_DROP %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_CAP_AMBIENT_CLEAR_ALL: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return err
	}
	return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
}

func (s agentStep) run() agentResult {
	if s.Path != "" {
		s.Path = filepath.Join(os.Getenv(envAgentHostRoot), s.Path)
	}
	switch s.Op {
	case "read":
		b, err := os.ReadFile(s.Path)
		r := outcome(err)
		r.Out = string(b)
		return r
	case "write":
		f, err := os.OpenFile(s.Path, os.O_WRONLY, 0)
		if err != nil {
			return outcome(fmt.Errorf("open: %w", err))
		}
		defer f.Close()
		_, err = f.Write([]byte(s.Data))
		return outcome(err)
	case "mkdir":
		return outcome(os.Mkdir(s.Path, 0o755))
	case "rmdir":
		return outcome(unix.Rmdir(s.Path))
	case "find-self":
		return findSelf(s.Path)
	case "start-scope":
		ctx, cancel := context.WithTimeout(context.Background(), 2*systemd.Timeout)
		defer cancel()
		b, err := systemd.Open(ctx, "")
		if err != nil {
			return outcome(err)
		}
		defer b.Close()
		return outcome(b.GrantScopes([]systemd.Scope{{Unit: s.Unit, Slice: s.Slice}}).StartScope(systemd.Scope{Unit: s.Unit, Slice: s.Slice}, s.PIDs))
	case "set-property":
		v, err := strconv.ParseUint(s.Data, 10, 64)
		if err != nil {
			return outcome(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*systemd.Timeout)
		defer cancel()
		b, err := systemd.Open(ctx, "")
		if err != nil {
			return outcome(err)
		}
		defer b.Close()
		return outcome(b.Grant([]string{s.Unit}).SetProperty(s.Unit, systemd.CPUWeight, v))
	case "attach":
		ctx, cancel := context.WithTimeout(context.Background(), 2*systemd.Timeout)
		defer cancel()
		c, err := sd.NewSystemConnectionContext(ctx)
		if err != nil {
			return outcome(err)
		}
		defer c.Close()
		pids := make([]uint32, len(s.PIDs))
		for i, p := range s.PIDs {
			pids[i] = uint32(p)
		}
		return outcome(c.AttachProcessesToUnit(ctx, s.Unit, "", pids))
	}
	return agentResult{Err: "unknown step " + s.Op}
}

// findSelf walks the cgroup mount at point for the cgroup whose
// cgroup.procs lists this process: how an agent in a cgroup namespace can
// learn where it is in the host's tree, to resolve the relative paths
// /proc/<pid>/cgroup gives it.
func findSelf(point string) agentResult {
	me := strconv.Itoa(os.Getpid())
	var found []string
	err := filepath.WalkDir(point, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil // a cgroup removed meanwhile
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err == nil && slices.Contains(strings.Fields(string(b)), me) {
			found = append(found, "/"+strings.TrimPrefix(strings.TrimPrefix(p, point), "/"))
		}
		return nil
	})
	r := outcome(err)
	r.Out = strings.Join(found, " ")
	return r
}

func outcome(err error) agentResult {
	if err == nil {
		return agentResult{}
	}
	r := agentResult{Err: err.Error()}
	var en syscall.Errno
	var de godbus.Error
	switch {
	case errors.As(err, &en):
		r.Errno = unix.ErrnoName(en)
	case errors.As(err, &de):
		r.Errno = de.Name
	}
	return r
}

// runAgent runs steps as the agent (in a cgroup namespace when cgns) from
// its first instruction in the scratch cgroup dir (clone3 with
// CLONE_INTO_CGROUP), and returns what each did.
func runAgent(t *testing.T, dir string, cgns bool, steps []agentStep) []agentResult {
	t.Helper()
	fd, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	js, err := json.Marshal(steps)
	if err != nil {
		t.Fatal(err)
	}
	ns := "0"
	if cgns {
		ns = "1"
	}
	root := filepath.Join(t.TempDir(), "host")
	for _, m := range agentMounts {
		if err := os.MkdirAll(filepath.Join(root, m), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+roleAgent, envAgentNS+"="+ns, envAgentSteps+"="+string(js), envAgentHostRoot+"="+root)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agent (cgroup namespace %v): %v; stderr: %s", cgns, err, stderr.String())
	}
	var res []agentResult
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(steps) {
		t.Fatalf("agent's answer %q: %v", out, err)
	}
	t.Logf("agent (cgroup namespace %v) sees the host's %s beneath %s", cgns, strings.Join(agentMounts, " and "), root)
	for i, r := range res {
		what := steps[i].Op + " " + steps[i].Path + steps[i].Unit
		if steps[i].Data != "" {
			what += " <- " + steps[i].Data
		}
		t.Logf("MEASURE agent (cgroup namespace %v): %s: out %q errno %q err %q", cgns, what, r.Out, r.Errno, r.Err)
	}
	return res
}

// requireNsdelegate fails the test (skips it outside
// CGWARDEN_REQUIRE_REAL=1) unless /sys/fs/cgroup is a cgroup2 mount with
// nsdelegate, as systemd mounts it.
func requireNsdelegate(t *testing.T) {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		realtest.Unavailable(t, err.Error())
	}
	for _, line := range strings.Split(string(raw), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || f[4] != "/sys/fs/cgroup" {
			continue
		}
		if g[0] == "cgroup2" && slices.Contains(strings.Split(g[2], ","), "nsdelegate") {
			t.Logf("MEASURE mount: %s", line)
			return
		}
		realtest.Unavailable(t, "/sys/fs/cgroup is not cgroup2 mounted with nsdelegate: "+line)
	}
	realtest.Unavailable(t, "no mount at /sys/fs/cgroup")
}

// cgroupOf is pid's cgroup as the test (in the root cgroup namespace)
// reads it.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(strings.TrimSpace(string(b)), "0::")
}

func capField(status, name string) string {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestSystemdAgentInCgroupNamespace is what the fix-mode agent meets on a
// cgroup v2 node run by systemd (issue 36): containerd gives a container
// that is not privileged a cgroup namespace of its own, and systemd mounts
// cgroup2 with nsdelegate. A scratch tree holds a misplaced process (in
// the scratch's "misplaced", outside any pod, as a literal cgroup at the
// root is), an empty target container cgroup in "pod/ctr", and the agent's
// own cgroup "agent", the root of its namespace; a systemd tree holds a
// pod slice. The agent (uid 0, no capability) then reads placements and
// tries adoption's moves from inside its namespace, the same moves from
// the host's namespace, and the move asked of systemd over D-Bus; then a
// daemon-reload. The test fails if the kernel or systemd behave otherwise
// than docs/systemd.md ("On a v2 node the agent runs in a cgroup
// namespace") says.
func TestSystemdAgentInCgroupNamespace(t *testing.T) {
	realtest.RequireSystemd(t)
	requireNsdelegate(t)
	s := realtest.NewScratch(t)
	tree := realtest.NewSystemdTree(t)
	pod := tree.PodSlice("7c1d2e3f-0000-4000-8000-000000000036")
	ctrScope, _ := tree.Scope(pod, strings.Repeat("d4", 32))
	adopted := "cri-containerd-" + strings.Repeat(strings.TrimPrefix(tree.Prefix, "cgwt"), 8) + ".scope"
	// Units the agent starts (the second, only if systemd were to accept
	// a slice nobody made, which the grant refuses).
	strayScope, straySlice := "cri-containerd-"+strings.Repeat("e5", 32)+".scope", strings.TrimSuffix(pod, ".slice")+"x.slice"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, u := range []string{adopted, strayScope, straySlice} {
			if _, err := tree.Conn.StopUnitContext(ctx, u, "replace", nil); err != nil {
				t.Logf("cleanup: stopping %s: %v", u, err)
			}
		}
	})
	for _, d := range []string{"misplaced", "misplaced2", "misplaced3", "misplaced4", "pod", "pod/ctr", "agent"} {
		s.Mkdir(d)
	}
	stray := s.Path("pod/adopted", "")
	t.Cleanup(func() { _ = unix.Rmdir(stray) }) // made and removed by the agent; left only if it failed
	pid := func(rel string) int { return s.Start(rel, "sleep", "3600").Process.Pid }
	m1, m2, m3, m4 := pid("misplaced"), pid("misplaced2"), pid("misplaced3"), pid("misplaced4")
	procs := func(rel string) string { return s.Path(rel, "cgroup.procs") }

	// From inside the namespace: reads, then every move and write the
	// agent would make, then the move asked of systemd.
	in := runAgent(t, s.Path("agent", ""), true, []agentStep{
		{Op: "read", Path: "/proc/self/cgroup"},                                                        // 0
		{Op: "read", Path: fmt.Sprintf("/proc/%d/cgroup", m1)},                                         // 1
		{Op: "read", Path: "/proc/1/cgroup"},                                                           // 2
		{Op: "read", Path: "/proc/self/status"},                                                        // 3
		{Op: "read", Path: procs("misplaced")},                                                         // 4
		{Op: "find-self", Path: s.Points[0]},                                                           // 5
		{Op: "write", Path: procs("pod/ctr"), Data: itoa(m1)},                                          // 6
		{Op: "write", Path: procs("agent"), Data: itoa(m1)},                                            // 7
		{Op: "write", Path: s.Path("pod/ctr", "cpu.weight"), Data: "50"},                               // 8
		{Op: "write", Path: s.Path("agent", "cpu.weight"), Data: "50"},                                 // 9
		{Op: "mkdir", Path: stray},                                                                     // 10
		{Op: "rmdir", Path: stray},                                                                     // 11
		{Op: "start-scope", Unit: adopted, Slice: pod, PIDs: []int{m2}},                                // 12
		{Op: "attach", Unit: adopted, PIDs: []int{m3}},                                                 // 13
		{Op: "read", Path: "/proc/self/mountinfo"},                                                     // 14
		{Op: "set-property", Unit: pod, Data: "160"},                                                   // 15
		{Op: "write", Path: path.Join(s.Points[0], tree.CgroupOf(ctrScope), "cpu.weight"), Data: "77"}, // 16
		{Op: "start-scope", Unit: strayScope, Slice: straySlice, PIDs: []int{m4}},                      // 17
	})
	bindRoot := ""
	for _, l := range strings.Split(in[14].Out, "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.Contains(l, " - cgroup2 ") {
			t.Logf("MEASURE agent (cgroup namespace true): its mountinfo's cgroup2 line: %s", l)
			if strings.HasSuffix(f[4], "/host/sys/fs/cgroup") {
				bindRoot = f[3]
			}
		}
	}
	agentCg, miscg := s.Cgroup("agent"), s.Cgroup("misplaced")
	expect := func(what string, got agentResult, out, errno string) {
		t.Helper()
		if got.Errno != errno || (out != "" && got.Out != out) || (errno == "" && got.Err != "") {
			t.Errorf("%s: out %q errno %q (%s); want out %q errno %q", what, got.Out, got.Errno, got.Err, out, errno)
		}
	}
	expect("its own /proc/self/cgroup", in[0], "0::/\n", "")
	expect("the misplaced process's /proc/<pid>/cgroup", in[1], "0::/../misplaced\n", "")
	expect("PID 1's /proc/1/cgroup", in[2], "0::/../../init.scope\n", "")
	if e, b := capField(in[3].Out, "CapEff"), capField(in[3].Out, "CapBnd"); e != "0000000000000000" || b != "0000000000000000" {
		t.Errorf("the agent has capabilities: CapEff %s CapBnd %s", e, b)
	}
	if !slices.Contains(strings.Fields(in[4].Out), itoa(m1)) || in[4].Err != "" {
		t.Errorf("the misplaced cgroup's cgroup.procs, read from the namespace: %q (%s); want it to list %d", in[4].Out, in[4].Err, m1)
	}
	expect("the agent's own cgroup, found by its PID in the host's tree", in[5], agentCg, "")
	if got := path.Join(in[5].Out, strings.TrimPrefix(strings.TrimSpace(in[1].Out), "0::")); got != miscg {
		t.Errorf("the relative path resolved against the agent's own cgroup: %s; want %s", got, miscg)
	}
	expect("the move misplaced -> pod/ctr from the namespace", in[6], "", "ENOENT")
	expect("the move misplaced -> the namespace's root from the namespace", in[7], "", "ENOENT")
	expect("a weight outside the namespace, written from it", in[8], "", "")
	expect("a weight of the namespace's root, written from it", in[9], "", "EPERM")
	expect("mkdir in the pod outside the namespace", in[10], "", "")
	expect("rmdir in the pod outside the namespace", in[11], "", "")
	expect("StartTransientUnit of a scope with the misplaced PID, from the namespace", in[12], "", "")
	expect("AttachProcessesToUnit of the scope, from the namespace", in[13], "", "")
	expect("SetUnitProperties CPUWeight=160 of the pod slice, from the namespace", in[15], "", "")
	if !strings.Contains(in[17].Err, "not active") {
		t.Errorf("StartScope into a slice nobody made: %q; want it refused as not active", in[17].Err)
	}
	// Why the grant asks for an active slice, not a loaded one: systemd
	// loads a slice nobody made as "loaded" (a slice needs no unit file).
	if p, err := tree.Conn.GetUnitPropertyContext(t.Context(), straySlice, "LoadState"); err != nil || p.Value.Value() != "loaded" {
		t.Errorf("LoadState of a slice nobody made: %v, %v; want loaded", p, err)
	} else {
		t.Logf("MEASURE LoadState of a slice nobody made (%s): %v", straySlice, p.Value.Value())
	}
	expect("a weight of a systemd scope written into its file, from the namespace", in[16], "", "")
	podW, scopeW := path.Join(tree.CgroupOf(pod), "cpu.weight"), path.Join(tree.CgroupOf(ctrScope), "cpu.weight")
	weights := func(when string) (string, string) {
		t.Helper()
		p, c := readFile(t, podW), readFile(t, scopeW)
		t.Logf("MEASURE %s: pod slice cpu.weight %s (property 160), container scope cpu.weight %s (file written 77)", when, p, c)
		return p, c
	}
	if p, c := weights("after the agent's writes"); p != "160" || c != "77" {
		t.Errorf("after the agent's writes from its namespace: pod slice cpu.weight %s, want 160; scope %s, want 77", p, c)
	}
	if bindRoot != "/../.." {
		t.Errorf("the agent's mountinfo gives its bind mount of the host's cgroup2 the root %q; want /../.. (the hierarchy's root, relative to the namespace's)", bindRoot)
	}

	// The kernel's view of what happened.
	if got := cgroupOf(t, m1); got != miscg {
		t.Errorf("after the refused moves, the misplaced process is in %s; want %s", got, miscg)
	}
	if got := strings.TrimSpace(s.Read("pod/ctr", "cpu.weight")); got != "50" {
		t.Errorf("pod/ctr cpu.weight %s after the agent wrote 50", got)
	}
	scopeCg := tree.CgroupOf(pod) + "/" + adopted
	if got := cgroupOf(t, m2); got != scopeCg {
		t.Errorf("after StartTransientUnit, the process is in %s; want %s", got, scopeCg)
	}
	if got := cgroupOf(t, m3); got != scopeCg {
		t.Errorf("after AttachProcessesToUnit, the process is in %s; want %s", got, scopeCg)
	}

	// The same moves from the host's cgroup namespace, otherwise the same
	// agent (uid 0, no capability): allowed.
	out := runAgent(t, s.Path("agent", ""), false, []agentStep{
		{Op: "read", Path: fmt.Sprintf("/proc/%d/cgroup", m1)},
		{Op: "write", Path: procs("pod/ctr"), Data: itoa(m1)},
	})
	expect("the misplaced process's /proc/<pid>/cgroup from the host's namespace", out[0], "0::"+miscg+"\n", "")
	expect("the move misplaced -> pod/ctr from the host's namespace", out[1], "", "")
	if got := cgroupOf(t, m1); got != s.Cgroup("pod/ctr") {
		t.Errorf("after the move from the host's namespace, the process is in %s; want %s", got, s.Cgroup("pod/ctr"))
	}

	// Behind systemd's back: a process written into a scope's
	// cgroup.procs by hand (the test, root namespace).
	behind := tree.CgroupOf(ctrScope)
	if err := os.WriteFile(path.Join("/sys/fs/cgroup", behind, "cgroup.procs"), []byte(itoa(m4)), 0); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	tree.Reload()
	t.Logf("MEASURE daemon-reload took %v", time.Since(start).Round(time.Millisecond))
	for _, c := range []struct {
		what string
		pid  int
		want string
	}{
		{"moved by cgroup.procs into a plain cgroup", m1, s.Cgroup("pod/ctr")},
		{"moved by systemd into a new scope (StartTransientUnit)", m2, scopeCg},
		{"moved by systemd into that scope (AttachProcessesToUnit)", m3, scopeCg},
		{"moved by cgroup.procs into a systemd scope's cgroup", m4, behind},
	} {
		got := cgroupOf(t, c.pid)
		t.Logf("MEASURE after daemon-reload, the process %s is in %s", c.what, got)
		if got != c.want {
			t.Errorf("after daemon-reload, the process %s is in %s; want %s", c.what, got, c.want)
		}
	}
	if got := strings.TrimSpace(s.Read("pod/ctr", "cpu.weight")); got != "50" {
		t.Errorf("pod/ctr cpu.weight %s after daemon-reload; the agent wrote 50", got)
	}
	if p, c := weights("after daemon-reload"); p != "160" || c != "1" {
		t.Errorf("after daemon-reload: pod slice cpu.weight %s, want 160 (systemd's property); scope %s, want 1 (the file reset from its property)", p, c)
	}
	bus, err := systemd.Open(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	if u, ok, err := bus.Manages(scopeCg); err != nil || !ok || u != adopted {
		t.Errorf("systemd does not say %s is %s's cgroup: %q %v %v", scopeCg, adopted, u, ok, err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func readFile(t *testing.T, cg string) string {
	t.Helper()
	b, err := os.ReadFile(path.Join("/sys/fs/cgroup", cg))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
