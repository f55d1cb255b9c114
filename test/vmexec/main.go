package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", ":7711", "guest: the daemon's `address` (scripts/vmtest forwards a host port to this one)")
	addr := flag.String("addr", "", "host: the guest daemon's forwarded `address`, 127.0.0.1:PORT")
	root := flag.String("root", "", "host: the repository's root `directory`; the package's directory is taken relative to it")
	limit := flag.Int("limit", 150, "host: `seconds` a test binary may run before the guest's watchdog shows why it is stuck and kills it")
	silence := flag.Duration("silence", 210*time.Second, "host: how long the guest may say nothing before it counts as stalled")
	down := flag.String("down", "", "host: a `file` written when the guest stalled or went away; while it exists, binaries fail at once")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `usage:
  vmexec [-listen ADDR] guest                            the guest's daemon
  vmexec -addr ADDR -root DIR [flags] BINARY [ARGS...]   run a test binary in the guest (go test -exec)
  vmexec -addr ADDR [-silence D] ping|poweroff           is the daemon up; power the guest off
flags:
`)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	c := client{addr: *addr, silence: *silence}
	switch arg := flag.Arg(0); arg {
	case "guest":
		os.Exit(runGuest(*listen))
	case "ping", "poweroff":
		if err := c.ask(arg); err != nil {
			fmt.Fprintf(os.Stderr, "vmexec: %s: %v\n", arg, err)
			os.Exit(1)
		}
	default:
		if *root == "" || *limit <= 0 {
			fmt.Fprintln(os.Stderr, "vmexec: running a test binary needs -root and a -limit above 0")
			os.Exit(2)
		}
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintln(os.Stderr, "vmexec:", err)
			os.Exit(2)
		}
		r := &runner{client: c, root: *root, limit: *limit, down: *down, out: os.Stdout}
		os.Exit(r.run(wd, arg, flag.Args()[1:]))
	}
}

// runGuest is the guest's daemon on address listen; it returns at a
// poweroff job, and /init powers the guest off.
func runGuest(listen string) int {
	g := &guest{src: "/src", tmp: os.TempDir(), console: os.Stdout, sysrq: true, grace: 5 * time.Second}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		g.log("%v", err)
		return 1
	}
	g.log("listening on %s", ln.Addr())
	if err := g.serve(ln); err != nil {
		g.log("%v", err)
		return 1
	}
	return 0
}
