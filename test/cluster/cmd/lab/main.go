// Command lab is the cluster lane's Go entry point for scripts/cluster and
// scripts/scale (package lab does the work):
//
//	lab pki -dir D -node N -server URL   the lane's certificates, keys and kubeconfigs
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/cgwarden/cgwarden/test/cluster/lab"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "pki" {
		fmt.Fprintln(os.Stderr, "usage: lab pki -dir D -node N -server URL")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("lab pki", flag.ExitOnError)
	var p lab.PKI
	fs.StringVar(&p.Dir, "dir", "", "the lane's state directory (pki/ and the kubeconfigs go there)")
	fs.StringVar(&p.Node, "node", "", "the node's name")
	fs.StringVar(&p.Server, "server", "", "the API server's URL for the kubeconfigs")
	_ = fs.Parse(os.Args[2:])
	if err := p.Write(time.Now()); err != nil {
		fmt.Fprintln(os.Stderr, "lab pki:", err)
		os.Exit(1)
	}
}
