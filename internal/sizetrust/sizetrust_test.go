package sizetrust

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// fakeAPI answers GETs from a map; a missing object is NotFound, and err
// (when set) is every answer.
type fakeAPI struct {
	objs map[string]*unstructured.Unstructured // by resource/name
	err  error
}

func (f *fakeAPI) Get(_ context.Context, gvr schema.GroupVersionResource, name string) (*unstructured.Unstructured, error) {
	if f.err != nil {
		return nil, f.err
	}
	if o, ok := f.objs[gvr.Resource+"/"+name]; ok {
		return o, nil
	}
	return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
}

func obj(m map[string]any) *unstructured.Unstructured { return &unstructured.Unstructured{Object: m} }

func installed(actions ...any) map[string]*unstructured.Unstructured {
	return map[string]*unstructured.Unstructured{
		"validatingadmissionpolicies/" + PolicyName: obj(map[string]any{"spec": map[string]any{"failurePolicy": "Fail"}}),
		"validatingadmissionpolicybindings/" + PolicyName: obj(map[string]any{"spec": map[string]any{"policyName": PolicyName,
			"validationActions": actions}}),
		"nodes/n1": obj(map[string]any{"metadata": map[string]any{"name": "n1"}, "status": map[string]any{"allocatable": map[string]any{"cpu": "1900m"}}}),
	}
}

// TestChecker is each decision the agent makes from the API server.
func TestChecker(t *testing.T) {
	noBinding := installed("Deny")
	delete(noBinding, "validatingadmissionpolicybindings/"+PolicyName)
	failOpen := installed("Deny")
	failOpen["validatingadmissionpolicies/"+PolicyName] = obj(map[string]any{"spec": map[string]any{"failurePolicy": "Ignore"}})
	otherPolicy := installed("Deny")
	otherPolicy["validatingadmissionpolicybindings/"+PolicyName] = obj(map[string]any{"spec": map[string]any{"policyName": "allow-all",
		"validationActions": []any{"Deny"}}})
	noAlloc := installed("Deny")
	noAlloc["nodes/n1"] = obj(map[string]any{"metadata": map[string]any{"name": "n1"}})
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}, PolicyName, errors.New("no"))
	cases := []struct {
		name        string
		api         Getter
		flag        string
		annotations string
		says        string // in Untrusted or AllocatableUnknown, or TrustedBy
		alloc       int64
	}{
		{name: "policy and binding installed", api: &fakeAPI{objs: installed("Deny")}, annotations: "*", says: "is installed", alloc: 1900},
		{name: "policy and binding, Deny among actions", api: &fakeAPI{objs: installed("Audit", "Deny")}, annotations: "*", alloc: 1900},
		{name: "nothing installed", api: &fakeAPI{objs: map[string]*unstructured.Unstructured{}}, says: "is not installed, and --trust-size-annotations names no namespace"},
		{name: "nothing installed, flag", api: &fakeAPI{objs: map[string]*unstructured.Unstructured{}}, flag: "a,b", annotations: "a,b",
			says: "does not name the namespace"},
		{name: "policy without binding", api: &fakeAPI{objs: noBinding}, says: "ValidatingAdmissionPolicyBinding " + PolicyName + " is not installed", alloc: 1900},
		{name: "binding only warns", api: &fakeAPI{objs: installed("Warn")}, says: "does not deny", alloc: 1900},
		{name: "policy fails open", api: &fakeAPI{objs: failOpen}, says: "failurePolicy Ignore", alloc: 1900},
		{name: "binding of another policy", api: &fakeAPI{objs: otherPolicy}, says: `binds policy "allow-all"`, alloc: 1900},
		{name: "no RBAC to read the policy", api: &fakeAPI{err: forbidden}, says: "may not read ValidatingAdmissionPolicies"},
		{name: "API server unreachable at start", api: &fakeAPI{err: errors.New("dial tcp: connection refused")}, flag: "*", annotations: "*",
			says: "could not be checked"},
		{name: "no API server", api: nil, says: "cannot be checked without the API server"},
		{name: "node without allocatable", api: &fakeAPI{objs: noAlloc}, annotations: "*", says: "has no status.allocatable.cpu"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch := &Checker{API: c.api, Node: "n1", Namespaces: c.flag}
			ch.Refresh(context.Background())
			got := ch.Trust()
			if got.Annotations != c.annotations {
				t.Errorf("annotations trusted in %q, want %q (%+v)", got.Annotations, c.annotations, got)
			}
			if text := got.TrustedBy + " | " + got.Untrusted + " | " + got.AllocatableUnknown; !strings.Contains(text, c.says) {
				t.Errorf("%q does not say %q", text, c.says)
			}
			if got.AllocatableMilliCPU != c.alloc {
				t.Errorf("allocatable %dm, want %dm", got.AllocatableMilliCPU, c.alloc)
			}
		})
	}
}

// A check that cannot reach the API server keeps the last verdict; one
// that finds the policy gone drops the trust.
func TestCheckerKeepsVerdictThroughBlips(t *testing.T) {
	api := &fakeAPI{objs: installed("Deny")}
	ch := &Checker{API: api, Node: "n1"}
	if got := ch.Trust(); got.Annotations != "" {
		t.Fatalf("trusted %q before the first check", got.Annotations)
	}
	ch.Refresh(context.Background())
	api.err = errors.New("connection refused")
	ch.Refresh(context.Background())
	if got := ch.Trust(); got.Annotations != metadata.AllNamespaces || got.AllocatableMilliCPU != 1900 {
		t.Errorf("after a blip: %+v, want the last verdict", got)
	}
	api.err = nil
	delete(api.objs, "validatingadmissionpolicies/"+PolicyName)
	ch.Refresh(context.Background())
	if got := ch.Trust(); got.Annotations != "" || !strings.Contains(got.Untrusted, "not installed") {
		t.Errorf("policy removed: %+v, want no trust", got)
	}
}
