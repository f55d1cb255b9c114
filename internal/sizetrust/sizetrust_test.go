package sizetrust

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// fakeAPI is client-go's fake dynamic client (an object tracker that
// serves list and watch) holding objs; err, when set, is every list's
// answer. It counts the requests by verb and resource.
type fakeAPI struct {
	*dynfake.FakeDynamicClient
	mu    sync.Mutex
	calls map[string]int
	err   error
	// own: watches are fakes the test drives (held in watches), not the
	// tracker's.
	own     bool
	watches []*watch.RaceFreeFakeWatcher
}

// fail makes every list answer err from now on (nil: answer again).
func (f *fakeAPI) fail(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func newFakeAPI(t *testing.T, objs []runtime.Object, err error) *fakeAPI {
	t.Helper()
	c := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		policies: "ValidatingAdmissionPolicyList", bindings: "ValidatingAdmissionPolicyBindingList", nodes: "NodeList",
	}, objs...)
	f := &fakeAPI{FakeDynamicClient: c, calls: map[string]int{}, err: err}
	c.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls[a.GetVerb()+" "+a.GetResource().Resource]++
		if f.err != nil && a.GetVerb() == "list" {
			return true, nil, f.err
		}
		return false, nil, nil
	})
	c.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls["watch "+a.GetResource().Resource]++
		if f.own {
			w := watch.NewRaceFreeFake()
			f.watches = append(f.watches, w)
			return true, w, nil
		}
		return false, nil, nil
	})
	return f
}

func (f *fakeAPI) count(verb, res string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[verb+" "+res]
}

func obj(apiVersion, kind, name string, m map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetName(name)
	return u
}

func policy(failurePolicy string) *unstructured.Unstructured {
	return obj("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", PolicyName,
		map[string]any{"spec": map[string]any{"failurePolicy": failurePolicy}})
}

func binding(policyName string, actions ...any) *unstructured.Unstructured {
	return obj("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", PolicyName,
		map[string]any{"spec": map[string]any{"policyName": policyName, "validationActions": actions}})
}

func node(name, cpu string) *unstructured.Unstructured {
	m := map[string]any{}
	if cpu != "" {
		m["status"] = map[string]any{"allocatable": map[string]any{"cpu": cpu}}
	}
	return obj("v1", "Node", name, m)
}

// installed is the policy, its binding and node n1 (and another node, which
// the checker of n1 must not take for its own).
func installed(actions ...any) []runtime.Object {
	return []runtime.Object{policy("Fail"), binding(PolicyName, actions...), node("n1", "1900m"), node("n2", "64")}
}

// start starts a checker of n1 on api and waits for its first answers.
func start(t *testing.T, api *fakeAPI, flag string) *Checker {
	t.Helper()
	ch := &Checker{Node: "n1", Namespaces: flag}
	if api != nil {
		ch.API = api
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch.Start(ctx, 30*time.Second)
	return ch
}

// TestChecker is each decision the agent makes from the API server.
func TestChecker(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}, PolicyName, errors.New("no"))
	noAPI := apierrors.NewNotFound(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}, "")
	cases := []struct {
		name        string
		objs        []runtime.Object
		err         error
		noAPIServer bool
		flag        string
		annotations string
		says        string // in Untrusted or AllocatableUnknown, or TrustedBy
		alloc       int64
	}{
		{name: "policy and binding installed", objs: installed("Deny"), annotations: "*", says: "is installed", alloc: 1900},
		{name: "policy and binding, Deny among actions", objs: installed("Audit", "Deny"), annotations: "*", alloc: 1900},
		{name: "nothing installed", says: "is not installed, and --trust-size-annotations names no namespace"},
		{name: "nothing installed, flag", flag: "a,b", annotations: "a,b", says: "does not name the namespace"},
		{name: "policy without binding", objs: []runtime.Object{policy("Fail"), node("n1", "1900m")},
			says: "ValidatingAdmissionPolicyBinding " + PolicyName + " is not installed", alloc: 1900},
		{name: "binding only warns", objs: installed("Warn"), says: "does not deny", alloc: 1900},
		{name: "policy fails open", objs: []runtime.Object{policy("Ignore"), binding(PolicyName, "Deny"), node("n1", "1900m")},
			says: "failurePolicy Ignore", alloc: 1900},
		{name: "binding of another policy", objs: []runtime.Object{policy("Fail"), binding("allow-all", "Deny"), node("n1", "1900m")},
			says: `binds policy "allow-all"`, alloc: 1900},
		{name: "no RBAC to read the policy", objs: installed("Deny"), err: forbidden, says: "may not read ValidatingAdmissionPolicies"},
		{name: "an API server without ValidatingAdmissionPolicies", err: noAPI, says: "is not installed"},
		{name: "API server unreachable at start", objs: installed("Deny"), err: errors.New("dial tcp: connection refused"), flag: "*", annotations: "*",
			says: "could not be checked"},
		{name: "no API server", noAPIServer: true, says: "cannot be checked without the API server"},
		{name: "node without allocatable", objs: []runtime.Object{policy("Fail"), binding(PolicyName, "Deny"), node("n1", "")},
			annotations: "*", says: "has no status.allocatable.cpu"},
		{name: "node not there", objs: []runtime.Object{policy("Fail"), binding(PolicyName, "Deny"), node("n2", "64")},
			annotations: "*", says: "Node n1 not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var api *fakeAPI
			if !c.noAPIServer {
				api = newFakeAPI(t, c.objs, c.err)
			}
			got := start(t, api, c.flag).Trust()
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

// waitTrust waits until the checker's verdict satisfies ok.
func waitTrust(t *testing.T, ch *Checker, what string, ok func(metadata.Trust) bool) {
	t.Helper()
	poll.Every(10*time.Millisecond).Until(t, 30*time.Second, what, func() (bool, string, error) {
		tr := ch.Trust()
		return ok(tr), fmt.Sprintf("%+v", tr), nil
	})
}

// The verdict follows the objects as they change, through the watches
// alone: no check before trust, trust when the policy comes, a new cap
// when the Node's allocatable changes, no trust when the policy goes —
// and not one request beyond the first list and watch of each.
func TestCheckerFollowsTheWatches(t *testing.T) {
	api := newFakeAPI(t, []runtime.Object{node("n1", "1900m"), node("n2", "64")}, nil)
	changes := metadata.NewChanges()
	ch := &Checker{API: api, Node: "n1", Changes: changes}
	// pending: what the weight holder reads the sizes on.
	pending := func(within time.Duration) bool {
		select {
		case <-changes.C():
			return true
		case <-time.After(within):
			return false
		}
	}
	if got := ch.Trust(); got.Annotations != "" || !strings.Contains(got.Untrusted, "not checked yet") {
		t.Fatalf("before the start: %+v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch.Start(ctx, 30*time.Second)
	if got := ch.Trust(); got.Annotations != "" || got.AllocatableMilliCPU != 1900 {
		t.Fatalf("no policy: %+v", got)
	}
	pols, binds, ns := api.Resource(policies), api.Resource(bindings), api.Resource(nodes)
	if _, err := pols.Create(ctx, policy("Fail"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := binds.Create(ctx, binding(PolicyName, "Deny"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTrust(t, ch, "policy installed", func(got metadata.Trust) bool { return got.Annotations == metadata.AllNamespaces })
	if _, err := ns.Update(ctx, node("n1", "3"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTrust(t, ch, "allocatable 3", func(got metadata.Trust) bool { return got.AllocatableMilliCPU == 3000 })
	if !pending(time.Second) { // Trust answers before the watch notifies
		t.Error("the Node's new allocatable CPU did not notify")
	}
	if _, err := ns.Update(ctx, node("n2", "7"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if pending(300 * time.Millisecond) {
		t.Error("another node's change notified")
	}
	if err := pols.Delete(ctx, PolicyName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTrust(t, ch, "policy removed", func(got metadata.Trust) bool {
		return got.Annotations == "" && strings.Contains(got.Untrusted, "not installed")
	})
	if !pending(time.Second) { // Trust answers before the watch notifies
		t.Error("the policy's removal did not notify")
	}
	if got := ch.Trust(); got.AllocatableMilliCPU != 3000 {
		t.Errorf("another node's change reached the cap: %+v", got)
	}
	for _, r := range []string{policies.Resource, bindings.Resource, nodes.Resource} {
		if l, w, g := api.count("list", r), api.count("watch", r), api.count("get", r); l != 1 || w != 1 || g != 0 {
			t.Errorf("%s: %d lists, %d watches, %d gets; want one list and one watch", r, l, w, g)
		}
	}
}

// A refused list (no RBAC) is not asked again at the informer's pace:
// one list of each object, then nothing until Every has passed.
func TestCheckerBacksOffRefusals(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("no"))
	api := newFakeAPI(t, installed("Deny"), forbidden)
	ch := &Checker{API: api, Node: "n1", Every: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch.Start(ctx, 30*time.Second)
	if got := ch.Trust(); !strings.Contains(got.Untrusted, "may not read") || !strings.Contains(got.AllocatableUnknown, "may not read Nodes") {
		t.Fatalf("refused: %+v", got)
	}
	// The informer retries a failed list after 0.8 s, then 1.6 s: give
	// it time for both.
	time.Sleep(3 * time.Second)
	for _, r := range []string{policies.Resource, bindings.Resource, nodes.Resource} {
		if l := api.count("list", r); l != 1 {
			t.Errorf("%s: %d lists within 3 s of a refusal, want 1", r, l)
		}
	}
}

// A list the API server does not answer changes nothing the watches had
// listed (a blip does not move every weight on the node).
func TestCheckerKeepsVerdictThroughBlips(t *testing.T) {
	api := newFakeAPI(t, installed("Deny"), nil)
	api.own = true
	ch := start(t, api, "")
	if got := ch.Trust(); got.Annotations != metadata.AllNamespaces || got.AllocatableMilliCPU != 1900 {
		t.Fatalf("installed: %+v", got)
	}
	// The API server goes away: each watch ends as too old (the
	// informer must list again), and each list fails.
	api.fail(errors.New("dial tcp: connection refused"))
	// One bound of 30 s for the watches and the lists again.
	deadline := time.Now().Add(30 * time.Second)
	poll.Every(10*time.Millisecond).Until(t, 30*time.Second, "3 watches", func() (bool, string, error) {
		api.mu.Lock()
		n := len(api.watches)
		api.mu.Unlock()
		return n == 3, fmt.Sprintf("%d watches", n), nil
	})
	for _, w := range api.watches {
		w.Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	}
	for _, r := range []string{policies.Resource, bindings.Resource, nodes.Resource} {
		poll.Every(10*time.Millisecond).UntilTrue(t, time.Until(deadline), r+" listed again after its watch expired, within the 30 s", func() bool {
			return api.count("list", r) >= 2
		})
	}
	waitTrust(t, ch, "the failed lists seen", func(metadata.Trust) bool {
		return ch.policy.view().err != nil && ch.binding.view().err != nil && ch.node.view().err != nil
	})
	if got := ch.Trust(); got.Annotations != metadata.AllNamespaces || got.AllocatableMilliCPU != 1900 {
		t.Errorf("after a blip: %+v, want the last verdict", got)
	}
}

// Every verdict carries --max-size as given, with or without the API
// server: the bound is the operator's, not something a watch can lose.
func TestCheckerCarriesMaxSizes(t *testing.T) {
	m, err := vmsize.ParseMaxSizes("tenant=2,*=8")
	if err != nil {
		t.Fatal(err)
	}
	without := &Checker{Node: "n1", MaxSizes: m}
	with := &Checker{API: newFakeAPI(t, nil, nil), Node: "n1", MaxSizes: m}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	with.Start(ctx, 5*time.Second)
	for name, c := range map[string]*Checker{"no API server": without, "API server": with} {
		if got := c.Trust(); got.MaxSizes != m || got.MaxSizes.For("tenant").MilliCPU != 2000 {
			t.Errorf("%s: verdict %+v, want --max-size %s", name, got, m)
		}
	}
}

// The Node's container runtime reaches NodeInfo from the watch the
// allocatable CPU comes from, and follows it: unknown ("", never a guess)
// without an API server, before the Node is read, for a Node that does
// not say, and for a node that is not there; another Node's runtime is
// never taken.
func TestCheckerNodeInfo(t *testing.T) {
	withRuntime := func(name, version string) *unstructured.Unstructured {
		n := node(name, "2")
		if version != "" {
			_ = unstructured.SetNestedField(n.Object, version, "status", "nodeInfo", "containerRuntimeVersion")
		}
		return n
	}
	if got := (&Checker{Node: "n1"}).NodeInfo(); got != (metadata.NodeInfo{}) {
		t.Errorf("no API server: %+v, want unknown", got)
	}
	for _, c := range []struct {
		name string
		objs []runtime.Object
		want string
	}{
		{"runtime reported", []runtime.Object{withRuntime("n1", "containerd://2.4.2"), withRuntime("n2", "cri-o://1.33.1")}, "containerd://2.4.2"},
		{"Node without nodeInfo", []runtime.Object{withRuntime("n1", ""), withRuntime("n2", "cri-o://1.33.1")}, ""},
		{"Node not there", []runtime.Object{withRuntime("n2", "cri-o://1.33.1")}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := start(t, newFakeAPI(t, c.objs, nil), "").NodeInfo().ContainerRuntimeVersion; got != c.want {
				t.Errorf("runtime %q, want %q", got, c.want)
			}
		})
	}
	api := newFakeAPI(t, []runtime.Object{withRuntime("n1", "containerd://2.4.2")}, nil)
	ch := start(t, api, "")
	if _, err := api.Resource(nodes).Update(context.Background(), withRuntime("n1", "containerd://2.5.0"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Every(10*time.Millisecond).Until(t, 30*time.Second, "the node info after containerd's upgrade", func() (bool, string, error) {
		ni := ch.NodeInfo()
		return ni.ContainerRuntimeVersion == "containerd://2.5.0", fmt.Sprintf("%+v", ni), nil
	})
}

// TestCheckerReadsItsNodeAsTheNode: with NodeAPI (the node's own
// identity), the Node is read through it first, and through API only
// once it is refused; both refused, the allocatable CPU is unknown and
// says why.
func TestCheckerReadsItsNodeAsTheNode(t *testing.T) {
	refuseNodes := func(f *fakeAPI) *fakeAPI {
		f.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			f.mu.Lock()
			f.calls["list nodes"]++ // the counting reactor comes after this one
			f.mu.Unlock()
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("no"))
		})
		return f
	}
	for _, c := range []struct {
		name               string
		own, asNode        *fakeAPI
		want               int64
		ownAsked, nodeSeen bool
	}{
		{"as the node", refuseNodes(newFakeAPI(t, installed(), nil)), newFakeAPI(t, []runtime.Object{node("n1", "1900m")}, nil), 1900, false, true},
		{"as itself, the node refused", newFakeAPI(t, installed(), nil), refuseNodes(newFakeAPI(t, nil, nil)), 1900, true, true},
		{"both refused", refuseNodes(newFakeAPI(t, installed(), nil)), refuseNodes(newFakeAPI(t, nil, nil)), 0, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ch := &Checker{Node: "n1", API: c.own, NodeAPI: c.asNode}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch.Start(ctx, 30*time.Second)
			tr := ch.Trust()
			if tr.AllocatableMilliCPU != c.want {
				t.Errorf("allocatable %dm (%s), want %dm", tr.AllocatableMilliCPU, tr.AllocatableUnknown, c.want)
			}
			if c.want == 0 && !strings.Contains(tr.AllocatableUnknown, "may not read Nodes") {
				t.Errorf("both refused: unknown because %q, want the refusal named", tr.AllocatableUnknown)
			}
			if asked := c.own.count("list", "nodes") > 0; asked != c.ownAsked {
				t.Errorf("the agent's own identity asked for the Node: %v, want %v", asked, c.ownAsked)
			}
			if seen := c.asNode.count("list", "nodes") > 0; seen != c.nodeSeen {
				t.Errorf("the node's identity asked for the Node: %v, want %v", seen, c.nodeSeen)
			}
		})
	}
}
