// Command pause is the sandbox ("pause") container of the cluster test lane:
// it holds the pod's namespaces, reaps orphaned children (it is PID 1 of
// the pod when the pod shares its PID namespace) and exits on SIGINT or
// SIGTERM, as Kubernetes' own pause does. Built static (CGO_ENABLED=0) and
// packed into an image by ../mkimage.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
