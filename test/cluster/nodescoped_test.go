package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// TestAgentReadsPodsAsItsNode: node-scoped pod reads
// (deploy/kustomize/components/node-scoped; constrained impersonation,
// on by default from Kubernetes 1.36, the lane's v1.37.2). The
// observe-only agent from the lane's manifests with the component:
//
//   - its ServiceAccount may not list pods as itself (kubectl auth
//     can-i, answered by the API server's RBAC);
//   - the agent still knows its node's pods: its /inspect names a test
//     pod of the node, and its log says it reads them as the node; and
//     its own Node, read as the node: its audit names the runtime;
//   - a token of the agent's ServiceAccount bound to the agent's pod,
//     what a thief of the agent's token holds, lists the node's pods as
//     the node (field selector spec.nodeName) and is refused the
//     cluster's pods (no selector), another node's, acting as another
//     node, and any pod as itself.
func TestAgentReadsPodsAsItsNode(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	importAgentImage(t)
	ns := e.namespace(t)
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, bestEffort("sleeper", nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 120*time.Second, "pod sleeper running", func() (bool, string, error) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, "sleeper", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, "", err
	})
	const agentSA = "system:serviceaccount:cgwarden-system:cgwarden"
	e.installAgent(t, "testdata/agent-node-scoped")

	if out, err := runKubectl(e, "auth", "can-i", "list", "pods", "--all-namespaces", "--as", agentSA); err == nil || strings.TrimSpace(out) != "no" {
		t.Errorf("kubectl auth can-i list pods --as %s: %q (%v), want no", agentSA, strings.TrimSpace(out), err)
	}
	tok := e.agentReaderToken(t)
	poll.Until(t, 90*time.Second, "the agent's /inspect naming the node's pod "+ns+"/sleeper", func() (bool, string, error) {
		code, b, err := agentLoopback(tok, "/inspect")
		if err != nil {
			return false, err.Error(), nil
		}
		return code == 200 && strings.Contains(string(b), `"sleeper"`) && strings.Contains(string(b), ns),
			fmt.Sprintf("%d %.200s", code, b), nil
	})
	// Its own Node too, as the node: the runtime the audit's node header
	// names (and the allocatable CPU that caps every size), which the
	// base install's agent does not know without the size policy's grant
	// on Nodes (TestAgentIgnoresUntrustedSizes, TestV2NodeSeedsBeforeAndAfter).
	n, err := e.cs.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runtime := n.Status.NodeInfo.ContainerRuntimeVersion
	poll.Until(t, 60*time.Second, "the agent's audit naming its Node's runtime "+runtime, func() (bool, string, error) {
		code, b, err := agentLoopback(tok, "/audit")
		if err != nil {
			return false, err.Error(), nil
		}
		var a struct {
			Node struct {
				ContainerRuntimeVersion string `json:"containerRuntimeVersion"`
			} `json:"node"`
		}
		if err := json.Unmarshal(b, &a); err != nil {
			return false, fmt.Sprintf("%d %.200s", code, b), nil
		}
		return runtime != "" && a.Node.ContainerRuntimeVersion == runtime, fmt.Sprintf("runtime %q", a.Node.ContainerRuntimeVersion), nil
	})
	agent := e.agentPodOn(t, e.node)
	logs, err := runKubectl(e, "logs", "-n", agent.Namespace, agent.Name, "-c", "cgwarden")
	if err != nil || !strings.Contains(logs, "reading the node's pods as the node (system:node:"+e.node+")") {
		t.Errorf("the agent's log does not say it reads the pods as its node (%v):\n%s", err, tail(logs, 20))
	}

	// The agent's token, as a thief holds it: bound to its pod, so the
	// API server knows the node it runs on.
	tr, err := e.cs.CoreV1().ServiceAccounts("cgwarden-system").CreateToken(ctx, "cgwarden", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: agent.Name, UID: agent.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	stolen := rest.AnonymousClientConfig(admin)
	stolen.BearerToken = tr.Status.Token
	as := func(user string) kubernetes.Interface {
		c := rest.CopyConfig(stolen)
		c.Impersonate = rest.ImpersonationConfig{UserName: user}
		cs, err := kubernetes.NewForConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	onNode := func(node string) metav1.ListOptions {
		return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()}
	}
	node := as("system:node:" + e.node)
	l, err := node.CoreV1().Pods("").List(ctx, onNode(e.node))
	if err != nil {
		t.Fatalf("the agent's token, as its node, listing the node's pods: %v", err)
	}
	found := false
	for _, p := range l.Items {
		found = found || (p.Namespace == ns && p.Name == "sleeper")
	}
	if !found {
		t.Errorf("the agent's token, as its node, listed %d pods of the node without %s/sleeper", len(l.Items), ns)
	}
	for _, c := range []struct {
		what string
		cs   kubernetes.Interface
		opts metav1.ListOptions
	}{
		{"as its node, the cluster's pods", node, metav1.ListOptions{}},
		{"as its node, another node's pods", node, onNode("elsewhere")},
		{"as another node, that node's pods", as("system:node:elsewhere"), onNode("elsewhere")},
		{"as itself, the node's pods", as(""), onNode(e.node)},
	} {
		_, err := c.cs.CoreV1().Pods("").List(ctx, c.opts)
		if !apierrors.IsForbidden(err) {
			t.Errorf("the agent's token %s: %v, want forbidden", c.what, err)
		} else {
			t.Logf("the agent's token %s: refused (%v)", c.what, err)
		}
	}
}
