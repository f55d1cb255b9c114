package kubectlplugin

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// agent is the cgwarden agent pod of one node.
type agent struct {
	node, namespace, pod string
}

// rbacHint says what a user of the plugin needs, for forbidden errors.
func rbacHint(ns string) string {
	return fmt.Sprintf("kubectl cgwarden needs, in namespace %s: get and list on pods, and get and create on pods/portforward (WebSockets ask for get, SPDY for create; see docs/kubectl-plugin.md)", ns)
}

// findAgents lists the running agent pods (one per node), of node only
// when it is not empty, ordered by node.
func findAgents(ctx context.Context, pods corev1client.PodsGetter, o *Options) ([]agent, error) {
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
func running(pods []corev1.Pod) []agent {
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
	out := make([]agent, 0, len(byNode))
	for node, p := range byNode {
		out = append(out, agent{node: node, namespace: p.Namespace, pod: p.Name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].node < out[j].node })
	return out
}
