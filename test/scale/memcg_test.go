package scale

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

// sizerDeploymentFile is the sizer's Deployment as shipped: its
// container's memory limit is the limit the lane runs the sizer under.
const sizerDeploymentFile = "../../deploy/kustomize/sizer/deployment.yaml"

// sizerContainer reads the sizer's container of the shipped Deployment.
func sizerContainer(t *testing.T) corev1.Container {
	t.Helper()
	raw, err := os.ReadFile(sizerDeploymentFile)
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", sizerDeploymentFile, err)
	}
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		t.Fatalf("%s: a %T, want a Deployment", sizerDeploymentFile, obj)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "sizer" {
			return c
		}
	}
	t.Fatalf("%s: no container named sizer", sizerDeploymentFile)
	return corev1.Container{}
}

// sizerMemoryLimit reads the memory limit of the sizer's container in
// the shipped Deployment, in bytes.
func sizerMemoryLimit(t *testing.T) int64 {
	t.Helper()
	q, ok := sizerContainer(t).Resources.Limits[corev1.ResourceMemory]
	if !ok {
		t.Fatalf("%s: the sizer container has no memory limit", sizerDeploymentFile)
	}
	return q.Value()
}

// sizerLimitEnv is the environment the kubelet gives the sizer's
// container from its memory limit (limit, in bytes): each variable of
// the Deployment from a resourceFieldRef of limits.memory (GOMEMLIMIT),
// as NAME=limit/divisor.
func sizerLimitEnv(t *testing.T, limit int64) []string {
	t.Helper()
	var env []string
	for _, e := range sizerContainer(t).Env {
		if e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil || e.ValueFrom.ResourceFieldRef.Resource != "limits.memory" {
			continue
		}
		div := e.ValueFrom.ResourceFieldRef.Divisor.Value()
		if div <= 0 {
			div = 1
		}
		env = append(env, fmt.Sprintf("%s=%d", e.Name, (limit+div-1)/div))
	}
	return env
}

// memcgRoot is the cgroup v1 memory hierarchy (this lane's machines are
// cgroup v1, or hybrid with the memory controller on v1).
const memcgRoot = "/sys/fs/cgroup/memory"

// memcg is a scratch cgroup v1 memory cgroup of the test's, limited as a
// container's would be (memory.limit_in_bytes: what the kubelet sets on
// cgroup v1 from the container's memory limit; no swap on this machine).
type memcg struct {
	dir   string
	limit int64
}

// newMemcg makes a memory cgroup of a name of its own under memcgRoot
// with limit, and removes it at the end of the test (after the processes
// the test started in it ended: cleanups run last first).
func newMemcg(t *testing.T, limit int64) *memcg {
	t.Helper()
	if _, err := os.Stat(filepath.Join(memcgRoot, "memory.limit_in_bytes")); err != nil {
		t.Fatalf("no cgroup v1 memory controller at %s (%v): the sizer's memory test runs it in a v1 memory cgroup", memcgRoot, err)
	}
	dir := filepath.Join(memcgRoot, fmt.Sprintf("cgwarden-scale-sizer-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("making a memory cgroup: %v", err)
	}
	c := &memcg{dir: dir, limit: limit}
	t.Cleanup(func() {
		// A cgroup v1 directory goes once it holds no process; its
		// charges move to the parent.
		var err error
		for range 50 {
			if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			if tasks, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); len(bytes.TrimSpace(tasks)) > 0 {
				t.Logf("memory cgroup %s still holds %s", dir, bytes.Fields(tasks))
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Errorf("removing memory cgroup %s: %v", dir, err)
	})
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		t.Fatalf("%s: memory.limit_in_bytes: %v", dir, err)
	}
	if got := c.value(t, "memory.limit_in_bytes"); got != limit {
		t.Fatalf("%s: memory.limit_in_bytes reads %d after writing %d", dir, got, limit)
	}
	return c
}

// value reads a file of the cgroup that holds one integer.
func (c *memcg) value(t *testing.T, file string) int64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		t.Fatalf("%s/%s: %v", c.dir, file, err)
	}
	return n
}

// keyed reads a file of "key value" lines (memory.stat, memory.oom_control).
func (c *memcg) keyed(t *testing.T, file string) map[string]int64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

// memReading is what the cgroup and /proc say of a process's memory.
type memReading struct {
	// Usage is memory.usage_in_bytes (everything charged: anonymous
	// memory, page cache, kernel memory), MaxUsage its peak
	// (memory.max_usage_in_bytes), RSS memory.stat's rss + rss_huge
	// (anonymous memory), Cache memory.stat's cache.
	Usage, MaxUsage, RSS, Cache int64
	// Failcnt is memory.failcnt: how often usage hit the limit.
	Failcnt int64
	// UnderOOM and OOMKills are memory.oom_control's under_oom and
	// oom_kill.
	UnderOOM, OOMKills int64
	// VmRSS and VmHWM are the process's resident set now and at its
	// peak (/proc/PID/status).
	VmRSS, VmHWM int64
}

func (c *memcg) read(t *testing.T, pid int) memReading {
	t.Helper()
	st := c.keyed(t, "memory.stat")
	oom := c.keyed(t, "memory.oom_control")
	r := memReading{
		Usage: c.value(t, "memory.usage_in_bytes"), MaxUsage: c.value(t, "memory.max_usage_in_bytes"),
		RSS: st["rss"] + st["rss_huge"], Cache: st["cache"], Failcnt: c.value(t, "memory.failcnt"),
		UnderOOM: oom["under_oom"], OOMKills: oom["oom_kill"],
	}
	r.VmRSS, r.VmHWM = procStatusKB(t, pid, "VmRSS")*1024, procStatusKB(t, pid, "VmHWM")*1024
	return r
}

// procStatusKB reads a "Name:   N kB" line of /proc/PID/status (-1: the
// process is gone).
func procStatusKB(t *testing.T, pid int, name string) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, err := strconv.ParseInt(f[0], 10, 64)
				if err != nil {
					t.Fatalf("/proc/%d/status %s: %v", pid, name, err)
				}
				return n
			}
		}
	}
	t.Fatalf("/proc/%d/status: no %s", pid, name)
	return 0
}

// checkNoOOM fails the test if the sizer in c was killed or ever stood
// at its limit: the process must still run, the cgroup must never have
// been under OOM or OOM-killed anything, and its usage must never have
// hit the limit (memory.failcnt 0: the sizer's own memory is anonymous,
// and its log goes through a pipe to the test, so nothing reclaimable
// would have made room).
func (c *memcg) checkNoOOM(t *testing.T, s *sizerProc, r memReading, when string) {
	t.Helper()
	if ok, how := s.alive(); !ok {
		t.Errorf("%s: the sizer is no longer running (%s) under its %d MiB limit", when, how, c.limit>>20)
	}
	if r.OOMKills != 0 || r.UnderOOM != 0 {
		t.Errorf("%s: memory cgroup OOM: oom_kill %d, under_oom %d (limit %d MiB, peak %d MiB)", when, r.OOMKills, r.UnderOOM, c.limit>>20, r.MaxUsage>>20)
	}
	if r.Failcnt != 0 {
		t.Errorf("%s: the sizer's memory reached its limit %d times (memory.failcnt; limit %d MiB, peak %d MiB)", when, r.Failcnt, c.limit>>20, r.MaxUsage>>20)
	}
}
