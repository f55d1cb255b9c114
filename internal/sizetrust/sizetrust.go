package sizetrust

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// PolicyName is the name of the size policy's ValidatingAdmissionPolicy
// and of its ValidatingAdmissionPolicyBinding.
const PolicyName = "cgwarden-size-annotation"

// DefaultEvery is how often a Checker looks again (with up to a fifth of
// it added at random, so a fleet started together does not ask together).
const DefaultEvery = 10 * time.Minute

// FlagTrust is Trust.TrustedBy for namespaces --trust-size-annotations names.
const FlagTrust = "--trust-size-annotations names the namespace"

// The objects a Checker reads.
var (
	policies = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
	bindings = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}
	nodes    = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
)

// Getter reads one cluster-scoped object (a dynamic client does).
type Getter interface {
	Get(ctx context.Context, gvr schema.GroupVersionResource, name string) (*unstructured.Unstructured, error)
}

// dynGetter is a Getter over a dynamic client.
type dynGetter struct{ dyn dynamic.Interface }

func (d dynGetter) Get(ctx context.Context, gvr schema.GroupVersionResource, name string) (*unstructured.Unstructured, error) {
	return d.dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
}

// NewGetter is a Getter for rc.
func NewGetter(rc *rest.Config) (Getter, error) {
	c := rest.CopyConfig(rc)
	c.Timeout = 10 * time.Second
	dyn, err := dynamic.NewForConfig(c)
	if err != nil {
		return nil, err
	}
	return dynGetter{dyn}, nil
}

// Checker keeps the agent's Trust current.
type Checker struct {
	// API reads the policy and the Node; nil: neither is known (pods
	// from a CRI runtime without an API server).
	API Getter
	// Node is this node's name.
	Node string
	// Namespaces is --trust-size-annotations, as metadata.ParseNamespaces
	// returns it.
	Namespaces string
	// Every is the period between two checks (DefaultEvery if 0).
	Every time.Duration
	Log   *slog.Logger

	mu    sync.Mutex
	trust metadata.Trust
	done  bool
}

// Trust is the last verdict (before the first check: nothing trusted
// beyond --trust-size-annotations).
func (c *Checker) Trust() metadata.Trust {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		return c.flagOnly("not checked yet")
	}
	return c.trust
}

// Run checks every period until ctx is done (Refresh first, for a verdict
// before the first scan).
func (c *Checker) Run(ctx context.Context) {
	every := c.Every
	if every <= 0 {
		every = DefaultEvery
	}
	for {
		wait := every + time.Duration(rand.Int64N(int64(every)/5+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		c.Refresh(ctx)
	}
}

// Refresh checks the policy and the Node once. An answer that is not the
// API server's (it could not be reached) keeps the previous verdict on
// that point: a blip does not move every weight on the node.
func (c *Checker) Refresh(ctx context.Context) {
	c.mu.Lock()
	prev, had := c.trust, c.done
	c.mu.Unlock()
	t := c.flagOnly("")
	policyBy, policyWhy, perr := c.policy(ctx)
	switch {
	case perr != nil && had:
		t = mergePolicy(t, prev)
		c.logf("size policy not checked; keeping the last verdict", "err", perr)
	case perr != nil:
		t.Untrusted = fmt.Sprintf("the size policy could not be checked (%v)", perr) + c.flagClause()
	case policyBy != "":
		t = t.Merge(metadata.AllNamespaces, policyBy)
	default:
		t.Untrusted = policyWhy + c.flagClause()
	}
	alloc, unknown, nerr := c.allocatable(ctx)
	switch {
	case nerr != nil && had:
		t.AllocatableMilliCPU, t.AllocatableUnknown = prev.AllocatableMilliCPU, prev.AllocatableUnknown
	case nerr != nil:
		t.AllocatableMilliCPU, t.AllocatableUnknown = 0, fmt.Sprintf("the Node object could not be read (%v)", nerr)
	default:
		t.AllocatableMilliCPU, t.AllocatableUnknown = alloc, unknown
	}
	c.mu.Lock()
	changed := !had || t != c.trust
	c.trust, c.done = t, true
	c.mu.Unlock()
	if changed && c.Log != nil {
		c.Log.Info("trusted pod sizes", "annotations", orNone(t.Annotations), "trustedBy", t.TrustedBy, "untrusted", t.Untrusted,
			"allocatableMilliCPU", t.AllocatableMilliCPU, "allocatableUnknown", t.AllocatableUnknown)
	}
}

func (c *Checker) logf(msg string, args ...any) {
	if c.Log != nil {
		c.Log.Warn(msg, args...)
	}
}

// flagOnly is the trust of the flag alone; why says why the policy does
// not count.
func (c *Checker) flagOnly(why string) metadata.Trust {
	t := metadata.Trust{}.Merge(c.Namespaces, FlagTrust)
	if why != "" {
		t.Untrusted = why + c.flagClause()
	}
	t.AllocatableUnknown = "the Node object has not been read yet"
	return t
}

func (c *Checker) flagClause() string {
	if c.Namespaces == "" {
		return ", and --trust-size-annotations names no namespace"
	}
	return ", and --trust-size-annotations does not name the namespace"
}

// mergePolicy carries a previous verdict's policy trust over.
func mergePolicy(t, prev metadata.Trust) metadata.Trust {
	if prev.Annotations == metadata.AllNamespaces {
		return t.Merge(metadata.AllNamespaces, prev.TrustedBy)
	}
	t.Untrusted = prev.Untrusted
	return t
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// policy says whether the size policy is installed and in force: by is
// the reason to trust annotations ("" when not), why the reason not to.
// err is set only when the API server could not be asked.
func (c *Checker) policy(ctx context.Context) (by, why string, err error) {
	name := "the size policy (ValidatingAdmissionPolicy " + PolicyName + ")"
	if c.API == nil {
		return "", name + " cannot be checked without the API server", nil
	}
	pol, err := c.API.Get(ctx, policies, PolicyName)
	if w, err := apiWhy(err, name+" is not installed", "ValidatingAdmissionPolicies"); w != "" || err != nil {
		return "", w, err
	}
	bind, err := c.API.Get(ctx, bindings, PolicyName)
	if w, err := apiWhy(err, "the size policy's ValidatingAdmissionPolicyBinding "+PolicyName+" is not installed", "ValidatingAdmissionPolicyBindings"); w != "" || err != nil {
		return "", w, err
	}
	if why := Check(pol, bind); why != "" {
		return "", why, nil
	}
	return "the size policy (ValidatingAdmissionPolicy and binding " + PolicyName + ") is installed", "", nil
}

// Check says why a ValidatingAdmissionPolicy and its binding do not hold
// the annotation to the sizer ("" when they do): the binding must bind
// that policy with the Deny action, and the policy must fail closed.
func Check(pol, bind *unstructured.Unstructured) string {
	if fp, _, _ := unstructured.NestedString(pol.Object, "spec", "failurePolicy"); fp == "Ignore" {
		return "the size policy " + PolicyName + " has failurePolicy Ignore: a request its check cannot evaluate passes"
	}
	if name, _, _ := unstructured.NestedString(bind.Object, "spec", "policyName"); name != PolicyName {
		return fmt.Sprintf("the binding %s binds policy %q, not %s", PolicyName, name, PolicyName)
	}
	actions, _, _ := unstructured.NestedStringSlice(bind.Object, "spec", "validationActions")
	if !slices.Contains(actions, "Deny") {
		return fmt.Sprintf("the binding %s does not deny (validationActions %v)", PolicyName, actions)
	}
	return ""
}

// apiWhy turns a GET's error into a reason (absent, forbidden) or, when
// the API server did not answer, an error.
func apiWhy(err error, absent, what string) (string, error) {
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return "", nil
	case apierrors.IsNotFound(err):
		return absent, nil
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return "the agent may not read " + what + " (RBAC: the size-policy manifests grant it)", nil
	case errors.As(err, &status):
		return fmt.Sprintf("reading %s: %v", what, err), nil
	}
	return "", err
}

// allocatable reads the Node's status.allocatable.cpu.
func (c *Checker) allocatable(ctx context.Context) (milli int64, unknown string, err error) {
	if c.API == nil || c.Node == "" {
		return 0, "the Node object is not readable without the API server and the node's name", nil
	}
	n, err := c.API.Get(ctx, nodes, c.Node)
	if w, err := apiWhy(err, "Node "+c.Node+" not found", "Nodes"); w != "" || err != nil {
		return 0, w, err
	}
	return Allocatable(n)
}

// Allocatable reads a Node's status.allocatable.cpu; unknown says why it
// cannot (then milli is 0).
func Allocatable(n *unstructured.Unstructured) (milli int64, unknown string, err error) {
	q, ok, _ := unstructured.NestedString(n.Object, "status", "allocatable", "cpu")
	if !ok {
		return 0, "Node " + n.GetName() + " has no status.allocatable.cpu", nil
	}
	m, perr := metadata.Quantity(q)
	if perr != nil || m <= 0 {
		return 0, fmt.Sprintf("Node %s status.allocatable.cpu %q is not a CPU quantity above 0", n.GetName(), q), nil
	}
	return m, "", nil
}
