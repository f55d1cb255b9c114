package demo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The demo's processes are cgwarden itself, run as
// `cgwarden __demo-child burn|mem CPU`: the CLI hands that hidden command
// to ChildMain. A child waits on its stdin until the demo has moved it
// into its cgroup, so that it is charged there from its first busy
// instruction.
const (
	// ChildCommand is the hidden subcommand that runs ChildMain.
	ChildCommand = "__demo-child"
	roleBurn     = "burn"
	roleMem      = "mem"
	// memUserBytes is what the memory user touches and holds.
	memUserBytes = 64 << 20
)

// ChildMain is a demo child: a CPU burner or a memory user pinned to cpu
// (unless cpu < 0). It returns only on bad arguments; it exits when its
// parent, the demo, is gone.
func ChildMain(args []string, stdin io.Reader) error {
	if len(args) != 2 || (args[0] != roleBurn && args[0] != roleMem) {
		return fmt.Errorf("%s: want burn|mem CPU", ChildCommand)
	}
	cpu, err := strconv.Atoi(args[1])
	if err != nil {
		return fmt.Errorf("%s: cpu %q: %w", ChildCommand, args[1], err)
	}
	parent := os.Getppid()
	// Wait until moved: the demo writes a line once the process is in
	// its cgroup.
	if _, err := bufio.NewReader(stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("%s: waiting to be placed: %w", ChildCommand, err)
	}
	runtime.GOMAXPROCS(1)
	runtime.LockOSThread()
	if cpu >= 0 {
		pin(cpu)
	}
	orphaned := func() bool { return os.Getppid() != parent }
	if args[0] == roleMem {
		buf := make([]byte, memUserBytes)
		for i := 0; i < len(buf); i += 4096 {
			buf[i] = 1
		}
		for !orphaned() {
			time.Sleep(100 * time.Millisecond)
		}
		runtime.KeepAlive(buf)
		os.Exit(0)
	}
	for {
		for i := 0; i < 1<<22; i++ {
			spin++
		}
		if orphaned() {
			os.Exit(0)
		}
	}
}

// spin is what the burner increments, so that the compiler keeps the loop.
var spin uint64

// pin puts every thread of the process on cpu: sched_setaffinity acts on
// one thread, and a Go process has several.
func pin(cpu int) {
	var set unix.CPUSet
	set.Set(cpu)
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			_ = unix.SchedSetaffinity(tid, &set)
		}
	}
	_ = unix.SchedSetaffinity(0, &set)
}

// child is a running demo child.
type child struct {
	cmd  *exec.Cmd
	role string
	rel  string
}

// startChild starts a child of role in rel, pinned to cpu: it starts
// cgwarden's own binary, moves it, then lets it go.
func (d *run) startChild(role, rel string, cpu int) (*child, error) {
	cmd := exec.Command(d.o.Self, ChildCommand, role, strconv.Itoa(cpu))
	// Its own process group, so a Ctrl-C on the terminal reaches only the
	// demo, which then ends its children in order; the kernel kills a
	// child whose parent dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("demo child: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting demo child %s: %w", strings.Join(cmd.Args, " "), err)
	}
	c := &child{cmd: cmd, role: role, rel: rel}
	d.children = append(d.children, c)
	if err := d.s.move(rel, cmd.Process.Pid); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		return nil, fmt.Errorf("releasing demo child %d: %w", cmd.Process.Pid, err)
	}
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }
