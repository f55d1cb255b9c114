package kubectlplugin

import (
	"context"
	"fmt"
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
