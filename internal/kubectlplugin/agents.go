package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/pager"
)

// Agent is the cgwarden agent pod of one node.
type Agent struct {
	Node, Namespace, Pod string
	// UID and ServiceAccount are the pod's: what its answer tokens are
	// bound to and issued for (answerproof).
	UID, ServiceAccount string
}

// rbacHint says what a user of the plugin needs, for forbidden errors.
func rbacHint(ns string) string {
	return fmt.Sprintf("kubectl cgwarden needs, in namespace %s: list on pods, get and create on pods/portforward (WebSockets ask for get, SPDY for create), and create on serviceaccounts/token of the reader ServiceAccount; and create on tokenreviews (Role and ClusterRole cgwarden-plugin-user; see docs/kubectl-plugin.md)", ns)
}

// findAgents lists the running agent pods (one per node), of node only
// when it is not empty, ordered by node.
func findAgents(ctx context.Context, pods corev1client.PodsGetter, o *Options) ([]Agent, error) {
	opts := metav1.ListOptions{LabelSelector: o.AgentSelector}
	if o.Node != "" {
		opts.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", o.Node).String()
	}
	list, err := pods.Pods(o.AgentNamespace).List(ctx, opts)
	if apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("listing the cgwarden agents: %w\n%s", err, rbacHint(o.AgentNamespace))
	}
	if err != nil {
		return nil, fmt.Errorf("listing the cgwarden agents in namespace %s: %w", o.AgentNamespace, err)
	}
	agents := running(list.Items)
	if len(agents) == 0 {
		where := "on any node"
		if o.Node != "" {
			where = "on node " + o.Node
		}
		return nil, fmt.Errorf("no running cgwarden agent %s (pods in namespace %s with labels %s); is it installed? (kubectl apply -k deploy/kustomize/base)", where, o.AgentNamespace, o.AgentSelector)
	}
	return agents, nil
}

// running keeps one running pod per node (a DaemonSet mid-rollout can
// have two: the newer one is taken).
func running(pods []corev1.Pod) []Agent {
	byNode := map[string]corev1.Pod{}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
			continue
		}
		if old, ok := byNode[p.Spec.NodeName]; ok && old.CreationTimestamp.After(p.CreationTimestamp.Time) {
			continue
		}
		byNode[p.Spec.NodeName] = p
	}
	out := make([]Agent, 0, len(byNode))
	for node, p := range byNode {
		out = append(out, Agent{Node: node, Namespace: p.Namespace, Pod: p.Name, UID: string(p.UID), ServiceAccount: p.Spec.ServiceAccountName})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// namespacePage is how many pods one page of the namespace's LIST holds:
// the plugin keeps only each pod's node name, and a page bounds what is
// held at once.
const namespacePage = 500

// nodesOfNamespace is the set of nodes that run pods of ns: one paged pod
// LIST in ns, of the pods bound to a node and not finished (a finished
// pod has no cgroup left to audit), keeping only spec.nodeName. The API
// server has no field projection for pods; the pages bound the memory.
func nodesOfNamespace(ctx context.Context, pods corev1client.PodsGetter, ns string) (map[string]bool, error) {
	nodes := map[string]bool{}
	opts := metav1.ListOptions{FieldSelector: fields.AndSelectors(
		fields.OneTermNotEqualSelector("spec.nodeName", ""),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
	).String()}
	p := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return pods.Pods(ns).List(ctx, o)
	})
	p.PageSize = namespacePage
	err := p.EachListItem(ctx, opts, func(obj runtime.Object) error {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
			nodes[pod.Spec.NodeName] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of namespace %s (to ask only their nodes' agents): %w", ns, err)
	}
	return nodes, nil
}

// onNodes keeps the agents of the given nodes, in order.
func onNodes(agents []Agent, nodes map[string]bool) []Agent {
	var out []Agent
	for _, a := range agents {
		if nodes[a.Node] {
			out = append(out, a)
		}
	}
	return out
}

// fillRuntimes completes the node lines of an audit table: a node whose
// agent did not name its container runtime (an agent without the Node's
// RBAC, as deploy/kustomize/base installs it, or an older one) gets the
// runtime its kubelet reports in the Node's status.nodeInfo, read as
// the user (`kubectl get nodes -o wide` shows the same). A user who may
// not read Nodes keeps "runtime unknown", told once.
func fillRuntimes(ctx context.Context, errOut io.Writer, nodes corev1client.NodesGetter, audits []nodeAudit) {
	want := map[string]bool{}
	for _, a := range audits {
		if a.node != nil && a.node.CgroupVersion != "" && a.node.ContainerRuntimeVersion == "" {
			want[a.name] = true
		}
	}
	if len(want) == 0 {
		return
	}
	got, err := nodeRuntimes(ctx, nodes, want)
	if err != nil {
		fmt.Fprintf(errOut, "the container runtime of the nodes whose agents did not name it (read from their Nodes): %v\n", err)
	}
	for i := range audits {
		if r := got[audits[i].name]; r != "" && want[audits[i].name] {
			audits[i].node.ContainerRuntimeVersion = r
		}
	}
}

// nodeRuntimes reads the container runtime of each wanted node: one GET
// for one node, else one paged Node LIST keeping only the wanted nodes'
// runtimes (the pages bound the memory, as for the pods of a namespace).
func nodeRuntimes(ctx context.Context, nodes corev1client.NodesGetter, want map[string]bool) (map[string]string, error) {
	out := map[string]string{}
	if len(want) == 1 {
		for name := range want {
			n, err := nodes.Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return out, err
			}
			out[name] = n.Status.NodeInfo.ContainerRuntimeVersion
		}
		return out, nil
	}
	p := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return nodes.Nodes().List(ctx, o)
	})
	p.PageSize = namespacePage
	err := p.EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		if n, ok := obj.(*corev1.Node); ok && want[n.Name] {
			out[n.Name] = n.Status.NodeInfo.ContainerRuntimeVersion
		}
		return nil
	})
	return out, err
}
