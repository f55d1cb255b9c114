// Command etcd is etcd's server (go.etcd.io/etcd/server/v3/etcdmain) built
// in the cluster lane's one build module, beside Kubernetes: etcd's
// module publishes no main package of its own.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
