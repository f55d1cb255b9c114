package sizetrust

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/cgwarden/cgwarden/internal/apiconn"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// PolicyName is the name of the size policy's ValidatingAdmissionPolicy
// and of its ValidatingAdmissionPolicyBinding.
const PolicyName = "cgwarden-size-annotation"

// DefaultEvery is how long a watch the API server refused (no RBAC, no
// such API) waits before it asks again, doubled at each refusal up to
// MaxRefusedBackoff times it (with up to a fifth added at random, so a
// fleet started together does not ask together).
const DefaultEvery = 10 * time.Minute

// MaxRefusedBackoff bounds the doubling of Every after refusals: a node
// without the size policy's RBAC asks three times an hour at most.
const MaxRefusedBackoff = 6

// FlagTrust is Trust.TrustedBy for namespaces --trust-size-annotations names.
const FlagTrust = "--trust-size-annotations names the namespace"

// The objects a Checker watches.
var (
	policies = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
	bindings = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}
	nodes    = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
)

// NewClient is the dynamic client a Checker watches through, for rc.
func NewClient(rc *rest.Config) (dynamic.Interface, error) {
	return dynamic.NewForConfig(rc)
}

// Checker keeps the agent's Trust current: it watches the size policy,
// its binding and the node's own Node object, each alone (a list and
// watch with the field selector metadata.name), and decides from what the
// watches hold. An idle node asks nothing beyond its three watches.
type Checker struct {
	// API is what the watches run through; nil: nothing is known (pods
	// from a CRI runtime without an API server).
	API dynamic.Interface
	// NodeAPI, when set, is the node's own identity (podsource.AsNode):
	// the Node watch asks through it first, and through API once it is
	// refused (a node reads its own Node; RBAC cannot narrow the agent's
	// own list of Nodes to one).
	NodeAPI dynamic.Interface
	// Node is this node's name.
	Node string
	// Namespaces is --trust-size-annotations, as metadata.ParseNamespaces
	// returns it.
	Namespaces string
	// MaxSizes is --max-size: each namespace's bound on its pods' sizes,
	// which every verdict carries (metadata.Trust.MaxSizes).
	MaxSizes vmsize.MaxSizes
	// Every is how long a refused watch waits before it asks again, at
	// first (DefaultEvery if 0).
	Every time.Duration
	Log   *slog.Logger
	// Changes, when set, is notified whenever a watched object changes
	// (the verdict may then be another).
	Changes *metadata.Changes

	mu sync.Mutex
	// policy, binding and node are nil until Start.
	policy, binding, node *watched
	// last is the verdict last logged.
	last   metadata.Trust
	logged bool
}

// Start watches the policy, its binding and the Node until ctx ends, and
// waits up to wait for each of them to be listed (or refused, or found
// unreachable): the verdict is then the API server's, not "not checked
// yet". Without an API, it does nothing.
func (c *Checker) Start(ctx context.Context, wait time.Duration) {
	if c.API == nil {
		return
	}
	every := c.Every
	if every <= 0 {
		every = DefaultEvery
	}
	name := "the size policy (ValidatingAdmissionPolicy " + PolicyName + ")"
	c.mu.Lock()
	c.policy = newWatched(c.API.Resource(policies), PolicyName, name+" is not installed", "ValidatingAdmissionPolicies", every, c.changed)
	c.binding = newWatched(c.API.Resource(bindings), PolicyName,
		"the size policy's ValidatingAdmissionPolicyBinding "+PolicyName+" is not installed", "ValidatingAdmissionPolicyBindings", every, c.changed)
	all := []*watched{c.policy, c.binding}
	if c.Node != "" {
		c.node = newWatched(c.API.Resource(nodes), c.Node, "Node "+c.Node+" not found", "Nodes", every, c.changed)
		if c.NodeAPI != nil {
			c.node.asNode = c.NodeAPI.Resource(nodes)
		}
		all = append(all, c.node)
	}
	c.mu.Unlock()
	for _, w := range all {
		go w.run(ctx)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for slices.ContainsFunc(all, func(w *watched) bool { return !w.view().settled() }) {
		select {
		case <-wctx.Done():
			return
		case <-tick.C:
		}
	}
	c.changed()
}

// changed logs the verdict when it is not the one last logged.
func (c *Checker) changed() {
	c.Changes.Notify()
	t := c.Trust()
	c.mu.Lock()
	news := !c.logged || t != c.last
	c.last, c.logged = t, true
	c.mu.Unlock()
	if news && c.Log != nil {
		c.Log.Info("trusted pod sizes", "annotations", orNone(t.Annotations), "trustedBy", t.TrustedBy, "untrusted", t.Untrusted,
			"allocatableMilliCPU", t.AllocatableMilliCPU, "allocatableUnknown", t.AllocatableUnknown, "maxSizes", orNone(t.MaxSizes.String()))
	}
}

// Trust is the verdict from what the watches hold now. An answer that is
// not the API server's (it could not be reached) changes nothing a watch
// had listed: a blip does not move every weight on the node.
func (c *Checker) Trust() metadata.Trust {
	c.mu.Lock()
	pol, bind, node, started := c.policy.view(), c.binding.view(), c.node.view(), c.policy != nil
	c.mu.Unlock()
	t := metadata.Trust{}.Merge(c.Namespaces, FlagTrust)
	t.MaxSizes = c.MaxSizes
	name := "the size policy (ValidatingAdmissionPolicy " + PolicyName + ")"
	switch by, why := c.policyVerdict(name, started, pol, bind); {
	case by != "":
		t = t.Merge(metadata.AllNamespaces, by)
	default:
		t.Untrusted = why + c.flagClause()
	}
	switch {
	case c.API == nil || c.Node == "":
		t.AllocatableUnknown = "the Node object is not readable without the API server and the node's name"
	case !started:
		t.AllocatableUnknown = "the Node object has not been read yet"
	default:
		if why := node.reason("the Node object has not been read yet", "the Node object could not be read"); why != "" {
			t.AllocatableUnknown = why
		} else {
			t.AllocatableMilliCPU, t.AllocatableUnknown, _ = Allocatable(node.obj)
		}
	}
	return t
}

// NodeInfo is what the Node object, as the watch last delivered it, says
// of the node (the container runtime); the zero NodeInfo while it is
// unknown: no API server or node name, not read yet, refused, absent. It
// rides on the Node watch the allocatable CPU is read from.
func (c *Checker) NodeInfo() metadata.NodeInfo {
	c.mu.Lock()
	node := c.node.view()
	c.mu.Unlock()
	if node.obj == nil {
		return metadata.NodeInfo{}
	}
	return NodeInfoOf(node.obj)
}

// NodeInfoOf reads what a Node says of itself: its
// status.nodeInfo.containerRuntimeVersion ("" when it has none).
func NodeInfoOf(n *unstructured.Unstructured) metadata.NodeInfo {
	v, _, _ := unstructured.NestedString(n.Object, "status", "nodeInfo", "containerRuntimeVersion")
	return metadata.NodeInfo{ContainerRuntimeVersion: v}
}

// policyVerdict says whether the size policy is installed and in force:
// by is the reason to trust annotations ("" when not), why the reason not
// to.
func (c *Checker) policyVerdict(name string, started bool, pol, bind view) (by, why string) {
	switch {
	case c.API == nil:
		return "", name + " cannot be checked without the API server"
	case !started:
		return "", "not checked yet"
	}
	if why := pol.reason("not checked yet", "the size policy could not be checked"); why != "" {
		return "", why
	}
	if why := bind.reason("not checked yet", "the size policy could not be checked"); why != "" {
		return "", why
	}
	if why := Check(pol.obj, bind.obj); why != "" {
		return "", why
	}
	return "the size policy (ValidatingAdmissionPolicy and binding " + PolicyName + ") is installed", ""
}

func (c *Checker) flagClause() string {
	if c.Namespaces == "" {
		return ", and --trust-size-annotations names no namespace"
	}
	return ", and --trust-size-annotations does not name the namespace"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
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

// refusal turns a list's error into a reason (the object's API absent,
// forbidden, unauthorized: the API server's answer, asked again only
// after a backoff) or "" (no error, or the API server did not answer: the
// informer retries soon).
func refusal(err error, absent, what string) string {
	switch {
	case err == nil:
		return ""
	case apierrors.IsNotFound(err):
		return absent
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return "the agent may not read " + what + " (RBAC: the size-policy manifests grant it)"
	}
	return ""
}

// Allocatable reads a Node's status.allocatable.cpu; unknown says why it
// cannot (then milli is 0).
func Allocatable(n *unstructured.Unstructured) (milli int64, unknown string, err error) {
	q, ok, _ := unstructured.NestedString(n.Object, "status", "allocatable", "cpu")
	if !ok {
		return 0, "Node " + n.GetName() + " has no status.allocatable.cpu", nil
	}
	m, perr := vmsize.Quantity(q)
	if perr != nil || m <= 0 {
		return 0, fmt.Sprintf("Node %s status.allocatable.cpu %q is not a CPU quantity above 0", n.GetName(), q), nil
	}
	return m, "", nil
}

// watched is one cluster-scoped object, watched by name: an informer on a
// list and watch with the field selector metadata.name=<name>, no resync.
// A list the API server refuses is asked again only after a backoff
// (every, doubled up to MaxRefusedBackoff times), not at the informer's
// pace of 30 s at most: a node without the RBAC makes a few requests an
// hour.
type watched struct {
	res dynamic.ResourceInterface
	// asNode, when set, is res as the node itself, preferred to res
	// (pref).
	asNode       dynamic.ResourceInterface
	pref         apiconn.Preferred
	name         string
	absent, what string
	every        time.Duration
	changed      func()

	mu sync.Mutex
	// synced is the informer's HasSynced (nil before run).
	synced func() bool
	// obj is the object as the informer last delivered it; nil: absent.
	obj *unstructured.Unstructured
	// refused is the last list's refusal; err its failure to reach the
	// API server (both cleared by a list that succeeds).
	refused string
	err     error
	// refusedWait is the current backoff after refusals; notBefore when
	// the next list may go.
	refusedWait time.Duration
	notBefore   time.Time
}

func newWatched(res dynamic.ResourceInterface, name, absent, what string, every time.Duration, changed func()) *watched {
	return &watched{res: res, name: name, absent: absent, what: what, every: every, changed: changed}
}

// view is what a watched object holds at one moment.
type view struct {
	absent  string
	obj     *unstructured.Unstructured
	listed  bool
	refused string
	err     error
}

func (w *watched) view() view {
	if w == nil {
		return view{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	v := view{absent: w.absent, obj: w.obj, refused: w.refused, err: w.err}
	v.listed = w.synced != nil && w.synced()
	return v
}

// settled: the API server has answered, or could not be reached.
func (v view) settled() bool { return v.listed || v.refused != "" || v.err != nil }

// reason is why the object is not there to decide from ("" when it is):
// refused, absent, not reached (unreachable, with the error) or not yet
// listed (notYet).
func (v view) reason(notYet, unreachable string) string {
	switch {
	case v.refused != "":
		return v.refused
	case v.listed && v.obj == nil:
		return v.absent
	case v.listed:
		return ""
	case v.err != nil:
		return fmt.Sprintf("%s (%v)", unreachable, v.err)
	}
	return notYet
}

// run runs the informer until ctx ends.
func (w *watched) run(ctx context.Context) {
	watchFn := func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return ask(w, func(r dynamic.ResourceInterface) (watch.Interface, error) { return r.Watch(ctx, o) })
	}
	ctrl := apiconn.WatchOne(w.name, w.list, watchFn, nil, w.setObj, func() { w.setObj(nil) })
	w.mu.Lock()
	w.synced = ctrl.HasSynced
	w.mu.Unlock()
	ctrl.RunWithContext(ctx)
}

// setObj records the object as the informer delivered it (nil: deleted).
func (w *watched) setObj(u *unstructured.Unstructured) {
	w.mu.Lock()
	w.obj = u
	w.mu.Unlock()
	w.changed()
}

// list lists the object, after the backoff of a previous refusal.
func (w *watched) list(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	w.mu.Lock()
	wait := time.Until(w.notBefore)
	w.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	l, err := ask(w, func(r dynamic.ResourceInterface) (*unstructured.UnstructuredList, error) { return r.List(ctx, o) })
	why := refusal(err, w.absent, w.what)
	w.mu.Lock()
	switch {
	case err == nil:
		w.refused, w.err, w.refusedWait = "", nil, 0
	case why != "":
		w.refused, w.err = why, nil
		switch {
		case w.refusedWait == 0:
			w.refusedWait = w.every
		case w.refusedWait < MaxRefusedBackoff*w.every:
			w.refusedWait = min(2*w.refusedWait, MaxRefusedBackoff*w.every)
		}
		w.notBefore = time.Now().Add(w.refusedWait + time.Duration(rand.Int64N(int64(w.refusedWait)/5+1)))
	default:
		w.err = err
	}
	w.mu.Unlock()
	w.changed()
	if err != nil {
		return nil, err
	}
	return l, nil
}

// ask makes a request through res, or, with asNode, as the identity pref
// prefers.
func ask[T any](w *watched, req func(dynamic.ResourceInterface) (T, error)) (T, error) {
	if w.asNode == nil {
		return req(w.res)
	}
	return apiconn.Either(&w.pref, [2]dynamic.ResourceInterface{w.asNode, w.res}, req)
}
