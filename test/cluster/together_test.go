package cluster

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// serviceMonitorCRD stands in for the Prometheus Operator's CRD, which the
// lane does not run: enough for the API server to accept the shipped
// ServiceMonitor (its fields are not validated here; deploy/test checks
// the object and the Prometheus test scrapes what it describes).
var serviceMonitorCRD = map[string]any{
	"apiVersion": "apiextensions.k8s.io/v1",
	"kind":       "CustomResourceDefinition",
	"metadata":   map[string]any{"name": "servicemonitors.monitoring.coreos.com"},
	"spec": map[string]any{
		"group": "monitoring.coreos.com",
		"names": map[string]any{"kind": "ServiceMonitor", "listKind": "ServiceMonitorList", "plural": "servicemonitors", "singular": "servicemonitor"},
		"scope": "Namespaced",
		"versions": []any{map[string]any{
			"name": "v1", "served": true, "storage": true,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
		}},
	},
}

// TestEveryConfigurationTogether: every part of the shipped manifests
// installed at once — the nri overlay's agent and `cgwarden nri`, fixing
// with every rule, the ServiceMonitor, the size policy (testdata/agent-all)
// and the sizer (as its own tests install it) — and every container of
// the agent and the sizer Ready, staying Ready without a restart for 60 s
// (issue #21: "base, fix, nri, servicemonitor, sizer, all together"; the
// others each have their test: base TestKubectlPlugin, fix
// TestAgentHoldsVMWeights, nri TestObserveOnlyAgentPrivileges, sizer
// TestSizerDeployedWithItsManifests).
func TestEveryConfigurationTogether(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	dyn := dynamicClient(t, e)
	importAgentImage(t)
	ensureCRD(t, dyn) // the sizer's VirtualMachines
	crds := dyn.Resource(crdGVR)
	sm := &unstructured.Unstructured{Object: serviceMonitorCRD}
	switch _, err := crds.Create(ctx, sm, metav1.CreateOptions{}); {
	case apierrors.IsAlreadyExists(err):
		t.Log("servicemonitors.monitoring.coreos.com exists: using it as is")
	case err != nil:
		t.Fatal(err)
	default:
		t.Cleanup(func() { _ = crds.Delete(context.Background(), sm.GetName(), metav1.DeleteOptions{}) })
		smGVR := schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}
		poll.Until(t, 60*time.Second, "the ServiceMonitor CRD served", func() (bool, string, error) {
			_, err := dyn.Resource(smGVR).Namespace("default").List(ctx, metav1.ListOptions{})
			return err == nil, "", nil
		})
	}
	_, _, _ = e.installAgent(t, "testdata/agent-all")
	sys, ns := e.namespace(t), e.namespace(t)
	e.installSizer(t, sys, ns)
	e.keepsReady(t, "the agent with every part (testdata/agent-all)", "cgwarden-system", "app.kubernetes.io/name=cgwarden")
	e.keepsReady(t, "the sizer beside it", sys, "app.kubernetes.io/name=cgwarden-sizer")
	pod, spec := e.agentPod(t)
	var names []string
	for _, c := range spec.Containers {
		names = append(names, c.Name)
	}
	t.Logf("agent pod %s: containers %v, args %v", pod.Name, names, spec.Containers[0].Args)
	if len(spec.Containers) != 2 {
		t.Errorf("the agent pod has containers %v, want the agent and nri", names)
	}
}
