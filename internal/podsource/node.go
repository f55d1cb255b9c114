package podsource

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"
)

// Node is the agent's API-facing pod metadata for one node, and nothing of
// its cgroup side: the node's pods (a KubeSource, one watch with the field
// selector spec.nodeName) and the VM objects they reference (VMWatches,
// one watch per VM). It is what the agent opens with --metadata
// kubernetes and --fix, put together for whoever runs that code without a
// host (the scale lane's simulated agents). Sizes come from
// hold.MetaSource{Lister: n, Live: n.VMs}.Sizes, as in the agent.
type Node struct {
	*KubeSource
	VMs *VMWatches
}

// OpenNode starts the pod informer of node and the VM watches on the API
// server of rc, and waits up to syncTimeout (30 s if 0) for the pods'
// first list; see NewKubernetes for what a timeout returns. Close stops
// both; so does the end of ctx.
func OpenNode(ctx context.Context, rc *rest.Config, node string, syncTimeout time.Duration, log *slog.Logger) (*Node, error) {
	if node == "" {
		return nil, errors.New("the node's pods need the node's name")
	}
	if syncTimeout <= 0 {
		syncTimeout = 30 * time.Second
	}
	pods, err := NewPodClient(rc)
	if err != nil {
		return nil, err
	}
	vms, err := OpenVMWatches(ctx, rc, log)
	if err != nil {
		return nil, err
	}
	k, err := NewKubernetes(ctx, pods, node, syncTimeout)
	if k == nil {
		vms.Close()
		return nil, err
	}
	return &Node{KubeSource: k, VMs: vms}, err
}

// Close stops the pod informer and the VM watches.
func (n *Node) Close() {
	n.KubeSource.Close()
	n.VMs.Close()
}
