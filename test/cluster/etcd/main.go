// Command etcd is etcd v3.6's own server main, built from its Go module for
// the cluster test lane (scripts/cluster): etcd publishes no Debian package
// of that version, and the lane downloads nothing but Go modules.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
