package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The daemons scripts/cluster starts, by the names it records them
// under.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	Containerd        = "containerd"
	Kubelet           = "kubelet"
	MetricsServer     = "metrics-server"
)

// containerdSocket is where scripts/cluster's containerd listens.
func (l Lab) containerdSocket() string {
	return filepath.Join(l.Dir, "containerd", "containerd.sock")
}

// defaultSocket is containerd's default address, where the kubelet's
// cAdvisor looks for it: kubelet v1.37 no longer has cAdvisor's
// --containerd flag, so its containerd factory dials this path or none.
const defaultSocket = "/run/containerd/containerd.sock"

// linkDefaultSocket makes containerd reachable at its default address, as
// on a real node, by a symbolic link to the lab's socket (connect(2)
// follows it). Without it the kubelet's cAdvisor registers no containerd
// factory ("Registration of the containerd container factory failed"), so
// it never takes a container's figures from the container's cgroup and
// always from the runtime's CRI stats: the lane then disagrees with a
// real node wherever the two differ (a container moved out of the cgroup
// its runtime made). /run/containerd is the lab's (up checks that no
// other containerd runs; down removes it when up made it); an existing
// socket there is left alone.
func (l Lab) linkDefaultSocket() error {
	if _, err := os.Lstat(defaultSocket); err == nil {
		if t, err := os.Readlink(defaultSocket); err == nil && t == l.containerdSocket() {
			return nil
		}
		return fmt.Errorf("%s exists and is not the lab's link: another containerd's?", defaultSocket)
	}
	if err := os.MkdirAll(filepath.Dir(defaultSocket), 0o711); err != nil {
		return err
	}
	return os.Symlink(l.containerdSocket(), defaultSocket)
}

// ctr runs the ctr built beside the recorded containerd against its
// socket, in the kubelet's namespace; "" and an error when there is no
// containerd record.
func (l Lab) ctr(ctx context.Context, args ...string) (string, error) {
	p, err := l.Get(Containerd)
	if err != nil {
		return "", err
	}
	args = append([]string{"--address", l.containerdSocket(), "-n", "k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, filepath.Join(filepath.Dir(p.Exe), "ctr"), args...).Output()
	return string(out), err
}

// PowerOff is what a power cut leaves of the node: the kubelet and
// containerd SIGKILLed (no SIGTERM first), then the shims and every
// process in a pod cgroup. A boot starts with an empty /run:
// containerd's and runc's state directories (and /run/containerd's shim
// sockets) are emptied once their mounts are gone; containerd's root
// (images, containers' metadata) and the kubelet's root directory stay,
// as on disk. The control plane is another machine's and keeps running.
func (l Lab) PowerOff() error {
	for _, n := range []string{Kubelet, Containerd} {
		if err := l.Stop(n, 0); err != nil {
			return err
		}
	}
	for _, pid := range l.shims() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if err := l.killCgroupProcs(); err != nil {
		return fmt.Errorf("power off: %w", err)
	}
	unmountUnder(filepath.Join(l.Dir, "kubelet", "pods"))
	unmountUnder(filepath.Join(l.Dir, "containerd", "state"))
	for _, d := range []string{filepath.Join(l.Dir, "containerd", "state"), filepath.Join(l.Dir, "runc"), "/run/containerd/s"} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("power off: %w", err)
		}
	}
	if err := l.removeCgroups(); err != nil {
		return fmt.Errorf("power off: %w", err)
	}
	return nil
}

// PowerOn boots the node again: containerd, then the kubelet, each as it
// was started, each waited for.
func (l Lab) PowerOn(ctx context.Context) error {
	if l.Running(Containerd) {
		return errors.New("containerd runs: power off first")
	}
	for _, n := range []string{Containerd, Kubelet} {
		if _, err := l.StartAgain(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// Down stops everything and removes what up made, in the order that
// leaves nothing behind: the pods through the kubelet (it stops their
// containers and unmounts their volumes), the kubelet, what containers
// are left through containerd, containerd, its leftover shims, the
// control plane; then the processes, mounts, network namespaces and
// cgroups left, the kubelet's sysctls and the paths outside Dir. It
// copies logs/ to saveLogs when that is not "", and removes Dir only
// when nothing of it is left (so that another Down can retry).
func (l Lab) Down(ctx context.Context, saveLogs string, logf func(string, ...any)) error {
	if _, err := os.Stat(l.Dir); errors.Is(err, fs.ErrNotExist) {
		logf("nothing to bring down (%s does not exist)", l.Dir)
		return nil
	}
	if l.Running(APIServer) && l.Running(Kubelet) {
		if err := l.deletePods(ctx, 90*time.Second); err != nil {
			logf("deleting the pods did not finish (%v); going on", err)
		}
		for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
			if out, err := l.ctr(ctx, "tasks", "ls", "-q"); err != nil || strings.TrimSpace(out) == "" {
				break
			}
		}
	}
	var errs []error
	stop := func(n string, grace time.Duration) {
		if err := l.Stop(n, grace); err != nil {
			errs = append(errs, err)
		}
	}
	stop(MetricsServer, 20*time.Second)
	stop(Kubelet, 30*time.Second)
	if l.Running(Containerd) {
		ids := func(what string) []string {
			out, _ := l.ctr(ctx, what, "ls", "-q")
			return strings.Fields(out)
		}
		for _, id := range ids("tasks") {
			_, _ = l.ctr(ctx, "tasks", "kill", "-s", "SIGKILL", id)
		}
		time.Sleep(time.Second)
		for _, id := range ids("tasks") {
			_, _ = l.ctr(ctx, "tasks", "delete", "-f", id)
		}
		for _, id := range ids("containers") {
			_, _ = l.ctr(ctx, "containers", "delete", id)
		}
	}
	stop(Containerd, 30*time.Second)
	for _, pid := range l.shims() {
		logf("killing leftover containerd shim %d", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Whatever else the lab started (the scale lane's kwok), then the
	// control plane, the store last.
	names, _ := l.Names()
	for _, n := range names {
		if !slices.Contains([]string{Scheduler, ControllerManager, APIServer, Etcd}, n) {
			stop(n, 20*time.Second)
		}
	}
	for _, n := range []string{Scheduler, ControllerManager, APIServer, Etcd} {
		stop(n, 20*time.Second)
	}
	if err := l.killCgroupProcs(); err != nil {
		logf("%v", err)
	}
	unmountUnder(l.Dir)
	l.cleanupNetns()
	if err := l.removeCgroups(); err != nil {
		logf("%v", err)
		errs = append(errs, err)
	}
	if err := l.restoreSysctls(); err != nil {
		errs = append(errs, err)
	}
	l.cleanupPaths(logf)
	if saveLogs != "" {
		if err := copyDir(filepath.Join(l.Dir, "logs"), saveLogs); err != nil {
			logf("saving the logs: %v", err)
		}
	}
	if left := mountsUnder(l.Dir); len(left) > 0 {
		return fmt.Errorf("still mounted, not removing %s: %s", l.Dir, strings.Join(left, " "))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("keeping %s so that another down can retry: %w", l.Dir, err)
	}
	return os.RemoveAll(l.Dir)
}

// deletePods deletes every pod with a grace of 5 s and waits until they
// are gone.
func (l Lab) deletePods(ctx context.Context, timeout time.Duration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(l.Dir, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	grace := int64(5)
	for _, ns := range nss.Items {
		if err := cs.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{}); err != nil {
			return err
		}
	}
	for {
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("%d pods left", len(pods.Items))
			}
			return err
		case <-time.After(time.Second):
		}
	}
}

// shims are the containerd shims of this lab's containerd: the ones
// given its socket.
func (l Lab) shims() []int {
	sock := l.containerdSocket()
	return processes(func(argv []string) bool {
		i := slices.Index(argv, "-address")
		return strings.Contains(filepath.Base(argv[0]), "containerd-shim") && i >= 0 && i+1 < len(argv) && argv[i+1] == sock
	})
}

// Hierarchies are the mounted cgroup hierarchies (each v1 controller's
// and the v2 one), from /proc/self/mountinfo.
func Hierarchies() []string {
	var out []string
	for _, m := range mounts() {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			out = append(out, m.target)
		}
	}
	return out
}

type mount struct{ target, fstype string }

// mounts reads /proc/self/mountinfo: the mount point (field 5, octal
// escapes undone) and the type (the first field after " - ").
func mounts() []mount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, types := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(types) < 1 {
			continue
		}
		out = append(out, mount{target: unescapeMount(fields[4]), fstype: types[0]})
	}
	return out
}

// unescapeMount undoes mountinfo's \NNN octal escapes (space, tab,
// newline, backslash).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountsUnder are the mount points at or under dir, deepest first.
func mountsUnder(dir string) []string {
	var out []string
	for _, m := range mounts() {
		if m.target == dir || strings.HasPrefix(m.target, dir+"/") {
			out = append(out, m.target)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out)
}

// unmountUnder unmounts everything at or under dir, deepest first, lazily
// when a mount is busy.
func unmountUnder(dir string) {
	for range 5 {
		m := mountsUnder(dir)
		if len(m) == 0 {
			return
		}
		for _, t := range m {
			if syscall.Unmount(t, 0) != nil {
				_ = syscall.Unmount(t, syscall.MNT_DETACH)
			}
		}
	}
}

// literalCgroups are the directories the misplace runtime makes at the
// root of every hierarchy (test/cluster/misplace).
func literalCgroups() []string {
	var out []string
	for _, h := range Hierarchies() {
		m, _ := filepath.Glob(filepath.Join(h, "kubepods*.slice:cri-containerd:*"))
		out = append(out, m...)
	}
	return out
}

// ourLiteralCgroups are those that were not there before up (none when
// up stopped before recording them: it started nothing then).
func (l Lab) ourLiteralCgroups() []string {
	b, err := os.ReadFile(filepath.Join(l.Dir, "state", "literal"))
	if err != nil {
		return nil
	}
	before := strings.Fields(string(b))
	return slices.DeleteFunc(literalCgroups(), func(d string) bool { return slices.Contains(before, d) })
}

// podCgroups are every kubepods tree and our literal cgroups.
func (l Lab) podCgroups() []string {
	var out []string
	for _, h := range Hierarchies() {
		if d := filepath.Join(h, "kubepods"); isDir(d) {
			out = append(out, d)
		}
	}
	return append(out, l.ourLiteralCgroups()...)
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// killCgroupProcs SIGKILLs every process left in the pod cgroups until
// none is left (10 s at most).
func (l Lab) killCgroupProcs() error {
	var pids []int
	for range 50 {
		pids = pids[:0]
		for _, root := range l.podCgroups() {
			_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil || !d.IsDir() {
					return nil
				}
				b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
				for _, f := range strings.Fields(string(b)) {
					if n, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, n) {
						pids = append(pids, n)
					}
				}
				return nil
			})
		}
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("processes still in the pod cgroups: %v", pids)
}

// removeCgroups removes every pod cgroup (rmdir only, deepest first: a
// cgroup with a process or a child stays), retrying for 10 s.
func (l Lab) removeCgroups() error {
	var left []string
	for range 50 {
		left = left[:0]
		for _, root := range l.podCgroups() {
			var dirs []string
			_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for _, d := range slices.Backward(dirs) {
				_ = syscall.Rmdir(d)
			}
			if isDir(root) {
				left = append(left, root)
			}
		}
		if len(left) == 0 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("could not remove the cgroups %s", strings.Join(left, " "))
}

// cleanupNetns removes the pod network namespaces this cluster made (CNI
// names them cni-…; those there before up are recorded).
func (l Lab) cleanupNetns() {
	b, _ := os.ReadFile(filepath.Join(l.Dir, "state", "netns"))
	before := strings.Fields(string(b))
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "cni-") || slices.Contains(before, e.Name()) {
			continue
		}
		p := filepath.Join("/run/netns", e.Name())
		_ = syscall.Unmount(p, 0)
		_ = os.Remove(p)
	}
}

// restoreSysctls writes back the sysctls the kubelet changed (up
// recorded them as "name value" lines).
func (l Lab) restoreSysctls() error {
	b, err := os.ReadFile(filepath.Join(l.Dir, "state", "sysctls"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		p := filepath.Join("/proc/sys", name)
		if cur, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			return fmt.Errorf("restore sysctl %s: %w", name, err)
		}
	}
	return nil
}

// cleanupPaths removes the kubelet's links in /var/log/containers to pod
// logs under Dir, and the paths outside Dir that up recorded as absent
// before it.
func (l Lab) cleanupPaths(logf func(string, ...any)) {
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, f := range links {
		if t, err := os.Readlink(f); err == nil && strings.HasPrefix(t, l.Dir+"/") {
			_ = os.Remove(f)
		}
	}
	b, _ := os.ReadFile(filepath.Join(l.Dir, "state", "created"))
	for _, p := range strings.Fields(string(b)) {
		switch p {
		case "/run/containerd", "/var/lib/kubelet", "/run/mount":
			// Made by this cluster's processes alone (up checked they
			// were absent).
			_ = os.RemoveAll(p)
		default:
			if err := syscall.Rmdir(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				logf("%s is not empty, leaving it", p)
			}
		}
	}
}

// copyDir copies the regular files of src into dst.
func copyDir(src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
