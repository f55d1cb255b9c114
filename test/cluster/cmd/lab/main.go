// Command lab is the cluster lane's Go entry point for scripts/cluster and
// scripts/scale (package lab does the work):
//
//	lab pki -dir D -node N -server URL   the lane's certificates, keys and kubeconfigs
//	lab up -kubernetes DIR -etcd DIR -containerd DIR -metrics-server DIR -images DIR -misplace DIR
//	                                      the one-node cluster, up and ready (lab.Up)
//	lab control-plane -kubernetes DIR -etcd DIR [-etcd-port N -etcd-peer-port N -apiserver-port N]
//	                                      etcd and the API server only (the scale lane)
//	lab start [flags] NAME BIN ARGS...    start a daemon, record it, wait until it is ready
//	lab again NAME                        start it again as it was started
//	lab stop [-grace D] NAME...           SIGTERM, SIGKILL after its grace; the record stays
//	lab restart NAME                      stop, then start again, and wait
//	lab running NAME                      exit 0 if it runs, 1 if not
//	lab pid NAME                          its PID (exit 1 if it does not run)
//	lab live                              the names of the daemons that run
//	lab status                            each recorded daemon: running (pid) or not
//	lab power off|on                      a node's power cut and boot
//	lab down                              stop everything, remove what up made
//
// Every subcommand but pki takes -dir (default $CGWARDEN_CLUSTER_DIR, or
// /var/lib/cgwarden-cluster) before its arguments.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cgwarden/cgwarden/test/cluster/lab"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	if err := run(context.Background(), os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "lab %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: lab pki|up|control-plane|start|again|stop|restart|running|pid|live|status|power|down [-dir D] ... (see cmd/lab's doc)")
	os.Exit(2)
}

// envList is a repeatable -env K=V.
type envList []string

func (e *envList) String() string     { return strings.Join(*e, " ") }
func (e *envList) Set(s string) error { *e = append(*e, s); return nil }

func run(ctx context.Context, cmd string, args []string) error {
	fs := flag.NewFlagSet("lab "+cmd, flag.ExitOnError)
	if cmd == "pki" {
		var p lab.PKI
		fs.StringVar(&p.Dir, "dir", "", "the lane's state directory (pki/ and the kubeconfigs go there)")
		fs.StringVar(&p.Node, "node", "", "the node's name")
		fs.StringVar(&p.Server, "server", "", "the API server's URL for the kubeconfigs")
		_ = fs.Parse(args)
		return p.Write(time.Now())
	}
	l := lab.FromEnv()
	fs.StringVar(&l.Dir, "dir", l.Dir, "the lane's state directory")
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, "lab: "+f+"\n", a...) }
	if cmd == "up" || cmd == "control-plane" {
		c := lab.Config{Ports: lab.DefaultPorts}
		fs.StringVar(&c.Kubernetes, "kubernetes", "", "the directory of kube-apiserver, kube-controller-manager, kube-scheduler, kubelet")
		fs.StringVar(&c.Etcd, "etcd", "", "the directory of etcd")
		fs.StringVar(&c.Containerd, "containerd", "", "up: the directory of containerd, its shim and ctr")
		fs.StringVar(&c.MetricsServer, "metrics-server", "", "up: the directory of metrics-server")
		fs.StringVar(&c.Images, "images", "", "up: the directory of pause.tar and busybox.tar")
		fs.StringVar(&c.Misplace, "misplace", "", "up: the directory of the misplace runtime")
		fs.StringVar(&c.Runc, "runc", "", "up: the runc both runtime handlers run (default: $CGWARDEN_CLUSTER_RUNC, or runc on PATH)")
		fs.StringVar(&c.Node, "node", "127.0.0.1", "up: the node's name (an address: the kubelet takes it as its InternalIP)")
		fs.IntVar(&c.Ports.Etcd, "etcd-port", c.Ports.Etcd, "etcd's client port")
		fs.IntVar(&c.Ports.EtcdPeer, "etcd-peer-port", c.Ports.EtcdPeer, "etcd's peer port")
		fs.IntVar(&c.Ports.APIServer, "apiserver-port", c.Ports.APIServer, "the API server's port")
		_ = fs.Parse(args)
		if cmd == "control-plane" {
			return l.ControlPlane(ctx, c)
		}
		if c.Runc == "" {
			r, err := lab.Runc()
			if err != nil {
				return err
			}
			c.Runc = r
		}
		return l.Up(ctx, c, logf)
	}
	var (
		p      lab.Proc
		env    envList
		probe  string
		grace  = fs.Duration("grace", -1, "stop: SIGKILL after this long (default: the daemon's own); start: the daemon's")
		logsTo = fs.String("save-logs", os.Getenv("CGWARDEN_CLUSTER_SAVE_LOGS"), "down: copy the daemons' logs here")
	)
	fs.Var(&env, "env", "start: K=V set for the daemon (repeatable)")
	fs.StringVar(&p.Ready.HTTP, "http", "", "start: ready when a GET of this URL answers 200")
	fs.StringVar(&probe, "exec", "", "start: ready when this command (split at spaces) succeeds")
	fs.StringVar(&p.Ready.Kubeconfig, "kubeconfig", "", "start: the kubeconfig for -readyz and -node")
	fs.BoolVar(&p.Ready.Readyz, "readyz", false, "start: ready when the API server's /readyz answers")
	fs.StringVar(&p.Ready.Node, "node", "", "start: ready when this Node is Ready")
	fs.DurationVar(&p.Ready.Settle, "settle", 0, "start: and still runs this long after")
	fs.DurationVar(&p.Ready.Timeout, "timeout", 60*time.Second, "start: how long to wait until it is ready")
	_ = fs.Parse(args)
	args = fs.Args()
	one := func() (string, error) {
		if len(args) != 1 {
			return "", fmt.Errorf("want one daemon's name, got %q", args)
		}
		return args[0], nil
	}
	switch cmd {
	case "start":
		if len(args) < 2 {
			return fmt.Errorf("want NAME BIN ARGS..., got %q", args)
		}
		p.Name, p.Exe, p.Args, p.Env = args[0], args[1], args[2:], env
		p.Grace = 20 * time.Second
		if *grace >= 0 {
			p.Grace = *grace
		}
		p.Ready.Exec = strings.Fields(probe)
		q, err := l.Start(ctx, p)
		if q != nil {
			fmt.Fprintf(os.Stderr, "lab: started %s (pid %d)\n", q.Name, q.PID)
		}
		return err
	case "again", "restart":
		n, err := one()
		if err != nil {
			return err
		}
		start := l.StartAgain
		if cmd == "restart" {
			start = l.Restart
		}
		q, err := start(ctx, n)
		if q != nil {
			fmt.Fprintf(os.Stderr, "lab: started %s (pid %d)\n", q.Name, q.PID)
		}
		return err
	case "stop":
		for _, n := range args {
			if err := l.Stop(n, *grace); err != nil {
				return err
			}
		}
		return nil
	case "running", "pid":
		n, err := one()
		if err != nil {
			return err
		}
		q, err := l.Get(n)
		if err != nil || !q.Running() {
			os.Exit(1)
		}
		if cmd == "pid" {
			fmt.Println(q.PID)
		}
		return nil
	case "live", "status":
		names, err := l.Names()
		if err != nil {
			return err
		}
		down := false
		for _, n := range names {
			q, err := l.Get(n)
			switch {
			case err == nil && q.Running() && cmd == "live":
				fmt.Println(n)
			case err == nil && q.Running():
				fmt.Printf("%s: running (pid %d)\n", n, q.PID)
			case cmd == "status":
				fmt.Printf("%s: NOT running\n", n)
				down = true
			}
		}
		if cmd == "status" && (down || len(names) == 0) {
			os.Exit(3)
		}
		return nil
	case "power":
		switch n, _ := one(); n {
		case "off":
			return l.PowerOff()
		case "on":
			return l.PowerOn(ctx)
		}
		return fmt.Errorf("want off or on, got %q", args)
	case "down":
		return l.Down(ctx, *logsTo, logf)
	}
	usage()
	return nil
}
