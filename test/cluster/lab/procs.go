package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultDir is the cluster's state directory when CGWARDEN_CLUSTER_DIR
// is not set (scripts/cluster's default).
const DefaultDir = "/var/lib/cgwarden-cluster"

// Lab is one lane's state directory: the process records under procs/,
// the daemons' logs under logs/.
type Lab struct {
	Dir string
}

// FromEnv is the cluster lane's Lab: $CGWARDEN_CLUSTER_DIR, or DefaultDir.
func FromEnv() Lab {
	if d := os.Getenv("CGWARDEN_CLUSTER_DIR"); d != "" {
		return Lab{Dir: d}
	}
	return Lab{Dir: DefaultDir}
}

// Proc is a daemon the lab started: what it runs, so that it can be
// started again the same way (a component's restart in a fault test),
// and which process it is now.
type Proc struct {
	Name string `json:"name"`
	// PID and Start (the process's start time in clock ticks since
	// boot, field 22 of /proc/PID/stat) name the process; a PID reused
	// by another process has another start time. PID is 0 once stopped.
	PID   int      `json:"pid"`
	Start uint64   `json:"start"`
	Exe   string   `json:"exe"`
	Args  []string `json:"args"`
	// Env is set on top of the starter's environment.
	Env []string `json:"env,omitempty"`
	// Grace is how long Stop waits after SIGTERM before SIGKILL.
	Grace time.Duration `json:"grace"`
	Ready Probe         `json:"ready"`
}

// Probe says when a started daemon is ready. Each part that is set must
// hold, in this order; Start waits for them and fails early when the
// daemon exits.
type Probe struct {
	// HTTP: a GET of this URL answers 200 (etcd's /health, the kubelet's
	// healthz).
	HTTP string `json:"http,omitempty"`
	// Exec: this command succeeds (containerd: ctr version over its
	// socket).
	Exec []string `json:"exec,omitempty"`
	// Kubeconfig with Readyz: the API server's /readyz answers ok; with
	// Node: that Node is Ready.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Readyz     bool   `json:"readyz,omitempty"`
	Node       string `json:"node,omitempty"`
	// Settle: the daemon still runs this long after the rest held (a
	// kubelet whose container manager fails exits after its node
	// turned Ready).
	Settle time.Duration `json:"settle,omitempty"`
	// Timeout bounds the wait (60 s when zero).
	Timeout time.Duration `json:"timeout,omitempty"`
}

func (l Lab) record(name string) string { return filepath.Join(l.Dir, "procs", name+".json") }

// LogFile is where the daemon name writes its output.
func (l Lab) LogFile(name string) string { return filepath.Join(l.Dir, "logs", name+".log") }

// Get reads the record of name (started or stopped since).
func (l Lab) Get(name string) (*Proc, error) {
	b, err := os.ReadFile(l.record(name))
	if err != nil {
		return nil, err
	}
	p := new(Proc)
	if err := json.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("%s: %w", l.record(name), err)
	}
	return p, nil
}

// Names are the daemons the lab has records of, sorted.
func (l Lab) Names() ([]string, error) {
	m, err := filepath.Glob(filepath.Join(l.Dir, "procs", "*.json"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range m {
		out = append(out, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	slices.Sort(out)
	return out, nil
}

// put writes p's record whole (a rename: never half a record).
func (l Lab) put(p *Proc) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	f := l.record(p.Name)
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		return err
	}
	tmp := f + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, f)
}

// Running reports whether p's process still runs: the same PID, the
// same start time, the same executable, not a zombie.
func (p *Proc) Running() bool {
	if p == nil || p.PID <= 0 {
		return false
	}
	st, ok := procStart(p.PID)
	if !ok || st != p.Start {
		return false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.PID))
	return err == nil && exe == p.Exe
}

// alive reports whether p's process has not exited yet: the same PID
// and start time, not a zombie. An exiting process loses its executable
// link (with its memory) before it closes its descriptors: Stop waits
// for alive, not Running, so that a port it listened on is free when
// Stop returns.
func (p *Proc) alive() bool {
	st, ok := procStart(p.PID)
	return ok && st == p.Start
}

// Running reports whether the daemon name runs.
func (l Lab) Running(name string) bool {
	p, err := l.Get(name)
	return err == nil && p.Running()
}

// procStart is field 22 of /proc/PID/stat (starttime); false for a
// process that is gone or a zombie.
func procStart(pid int) (uint64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after it start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so field 22 is f[19].
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	return st, err == nil
}

// processes are the PIDs of the live processes whose command line
// (argv, from /proc/PID/cmdline) match accepts. A process that exits
// while it is read, or a kernel thread (no command line), is left out.
func processes(match func(argv []string) bool) []int {
	var out []int
	m, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range m {
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if err != nil {
			continue
		}
		if _, ok := procStart(pid); ok && match(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			out = append(out, pid)
		}
	}
	return out
}

// Start starts p (its Name, Exe, Args, Env, Grace and Ready) in a session
// of its own, its output appended to LogFile(p.Name), records it, and
// waits until it is ready. The daemon inherits no descriptor but
// /dev/null and its log (Go's exec closes the rest): a lock held by
// whoever runs the lab (scripts/test's flock) must not stay held as long
// as the cluster runs. A daemon that runs already is an error.
func (l Lab) Start(ctx context.Context, p Proc) (*Proc, error) {
	if old, err := l.Get(p.Name); err == nil && old.Running() {
		return nil, fmt.Errorf("%s runs already (pid %d)", p.Name, old.PID)
	}
	if err := os.MkdirAll(filepath.Join(l.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(l.LogFile(p.Name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	// The executable as /proc/PID/exe will name it: resolved before the
	// start, so that a bad path starts nothing.
	exe, err := filepath.EvalSymlinks(p.Exe)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.Exe = exe
	cmd := exec.Command(p.Exe, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.Name, err)
	}
	// Reap it if it exits while this process lives (a test that
	// restarts a component); otherwise init does.
	go func() { _ = cmd.Wait() }()
	p.PID = cmd.Process.Pid
	// The start time is there as soon as the process is; the exe link
	// turns into p.Exe once it has exec'ed.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, ok := procStart(p.PID)
		if ok {
			p.Start = st
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.PID)); l == p.Exe {
				break
			}
		}
		if !ok || time.Now().After(deadline) {
			return nil, fmt.Errorf("%s exited at once%s", p.Name, l.tail(p.Name))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := l.put(&p); err != nil {
		return nil, err
	}
	if err := l.wait(ctx, &p); err != nil {
		return &p, err
	}
	return &p, nil
}

// StartAgain starts name again as it was started last.
func (l Lab) StartAgain(ctx context.Context, name string) (*Proc, error) {
	p, err := l.Get(name)
	if err != nil {
		return nil, err
	}
	return l.Start(ctx, *p)
}

// Restart stops name (its grace) and starts it again as it was started.
func (l Lab) Restart(ctx context.Context, name string) (*Proc, error) {
	if err := l.Stop(name, -1); err != nil {
		return nil, err
	}
	return l.StartAgain(ctx, name)
}

// Stop sends SIGTERM to name and SIGKILL after grace (its recorded Grace
// when grace < 0; 0 kills at once, a power cut), and returns once it is
// gone. The record stays, so that StartAgain can start it again.
func (l Lab) Stop(name string, grace time.Duration) error {
	p, err := l.Get(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if grace < 0 {
		grace = p.Grace
	}
	if p.Running() {
		if grace > 0 {
			_ = syscall.Kill(p.PID, syscall.SIGTERM)
			for end := time.Now().Add(grace); p.alive() && time.Now().Before(end); {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if p.alive() {
			if grace > 0 {
				fmt.Fprintf(os.Stderr, "lab: %s (pid %d) still runs %v after SIGTERM: SIGKILL\n", name, p.PID, grace)
			}
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
			for p.alive() {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	p.PID, p.Start = 0, 0
	return l.put(p)
}

// wait waits until p is ready by its Probe, failing early (with the end
// of its log) when it exits.
func (l Lab) wait(ctx context.Context, p *Proc) error {
	r := p.Ready
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var cs *kubernetes.Clientset
	if r.Kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", r.Kubeconfig)
		if err != nil {
			return err
		}
		cfg.Timeout = 5 * time.Second
		if cs, err = kubernetes.NewForConfig(cfg); err != nil {
			return err
		}
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	var checks []check
	if r.HTTP != "" {
		checks = append(checks, check{"GET " + r.HTTP, func() error {
			resp, err := hc.Get(r.HTTP)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s", resp.Status)
			}
			return nil
		}})
	}
	if len(r.Exec) > 0 {
		checks = append(checks, check{strings.Join(r.Exec, " "), func() error {
			out, err := exec.CommandContext(ctx, r.Exec[0], r.Exec[1:]...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%w: %.200s", err, out)
			}
			return nil
		}})
	}
	if cs != nil && r.Readyz {
		checks = append(checks, check{"the API server's /readyz", func() error {
			_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		}})
	}
	if cs != nil && r.Node != "" {
		checks = append(checks, check{"node " + r.Node + " Ready", func() error {
			n, err := cs.CoreV1().Nodes().Get(ctx, r.Node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return nil
				}
			}
			return errors.New("not Ready")
		}})
	}
	for _, c := range checks {
		for {
			err := c.ok()
			if err == nil {
				break
			}
			if !p.Running() {
				return fmt.Errorf("%s exited while waiting for %s%s", p.Name, c.what, l.tail(p.Name))
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: %s not within %v (last: %v)%s", p.Name, c.what, timeout, err, l.tail(p.Name))
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	if r.Settle > 0 {
		time.Sleep(r.Settle)
		if !p.Running() {
			return fmt.Errorf("%s exited %v after it was ready%s", p.Name, r.Settle, l.tail(p.Name))
		}
	}
	return nil
}

// check is one part of a Probe: what it waits for, and whether it holds.
type check struct {
	what string
	ok   func() error
}

// tail is the end of name's log, for an error.
func (l Lab) tail(name string) string {
	b, err := os.ReadFile(l.LogFile(name))
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return fmt.Sprintf(" (log %s, its end:\n%s)", l.LogFile(name), strings.Join(lines, "\n"))
}
