package sizer

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// --pod-level: on and off are taken as said; auto sizes at pod level
// only with an API server of 1.36 or later (both gates on by default)
// and every node's kubelet declaring InPlacePodLevelResourcesVerticalScaling.
func TestChooseLevel(t *testing.T) {
	all := NodeFeatures{Seen: 3}
	for _, tc := range []struct {
		name    string
		mode    PodLevelMode
		version string
		nodes   NodeFeatures
		want    Level
		why     string
	}{
		{"on", PodLevelOn, "v1.30.0", NodeFeatures{}, LevelPod, "--pod-level=on"},
		{"off", PodLevelOff, "v1.37.2", all, LevelContainer, "--pod-level=off"},
		{"the lane's", PodLevelAuto, "v1.37.2", all, LevelPod, "every node (3) declares"},
		{"first with both gates on", PodLevelAuto, "v1.36.0", all, LevelPod, "declares"},
		{"a vendor's suffix", PodLevelAuto, "v1.36.3-gke.1200", all, LevelPod, "declares"},
		{"resize gate alpha", PodLevelAuto, "v1.35.4", all, LevelContainer, "on by default from 1.36"},
		{"pod-level beta, no resize", PodLevelAuto, "v1.34.1", all, LevelContainer, "on by default from 1.36"},
		{"a node without", PodLevelAuto, "v1.37.2", NodeFeatures{Seen: 2, Lacking: "old-kubelet"}, LevelContainer, "node old-kubelet does not declare"},
		{"no node", PodLevelAuto, "v1.37.2", NodeFeatures{}, LevelContainer, "no node"},
		{"no version", PodLevelAuto, "", all, LevelContainer, "not one"},
	} {
		got, why := ChooseLevel(tc.mode, tc.version, tc.nodes)
		if got != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("%s: %s (%s), want %s (%q)", tc.name, got, why, tc.want, tc.why)
		}
	}
	for _, s := range []string{"auto", "on", "off"} {
		if m, err := ParsePodLevelMode(s); err != nil || string(m) != s {
			t.Errorf("%q: %q, %v", s, m, err)
		}
	}
	if _, err := ParsePodLevelMode("yes"); err == nil {
		t.Error("--pod-level=yes taken")
	}
}

// ProbeLevel reads the API server's version and the nodes' declared
// features (a fake clientset: the lane's TestSizerPodLevelResize probes a
// real one).
func TestProbeLevel(t *testing.T) {
	node := func(name string, features ...string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{DeclaredFeatures: features}}
	}
	for _, tc := range []struct {
		name    string
		version string
		nodes   []runtime.Object
		mode    PodLevelMode
		want    Level
	}{
		{"every node declares", "v1.37.2", []runtime.Object{node("a", "RestartAllContainersOnContainerExits", PodLevelResizeFeature), node("b", PodLevelResizeFeature)}, PodLevelAuto, LevelPod},
		{"one does not", "v1.37.2", []runtime.Object{node("a", PodLevelResizeFeature), node("b")}, PodLevelAuto, LevelContainer},
		{"an older API server", "v1.35.0", []runtime.Object{node("a", PodLevelResizeFeature)}, PodLevelAuto, LevelContainer},
		{"off asks nothing", "v1.37.2", []runtime.Object{node("a", PodLevelResizeFeature)}, PodLevelOff, LevelContainer},
	} {
		cs := fake.NewClientset(tc.nodes...)
		cs.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: tc.version}
		got, why, err := ProbeLevel(context.Background(), cs, tc.mode)
		if err != nil || got != tc.want {
			t.Errorf("%s: %s (%s), %v; want %s", tc.name, got, why, err, tc.want)
		}
		if tc.mode == PodLevelOff && len(cs.Actions()) != 0 {
			t.Errorf("%s: asked the API server %v", tc.name, cs.Actions())
		}
	}
}

// The webhook at LevelPod: a NeonVM runner pod gets spec.resources.
// requests.cpu and no container request, any pod-level resources it had
// kept; a pod sized by annotation keeps its container request.
func TestReviewPodLevel(t *testing.T) {
	h := &Webhook{VMs: fakeVMs{"ns/vm1": vm(2.0)}, Log: slog.New(slog.DiscardHandler), Level: LevelPod}
	review := func(p *corev1.Pod) (*corev1.Pod, *admissionv1.AdmissionResponse) {
		raw := mustJSON(t, p)
		r := h.Review(context.Background(), &admissionv1.AdmissionRequest{
			UID: "r1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: "ns",
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
		})
		if !r.Allowed || r.Patch == nil || len(r.Warnings) != 0 {
			t.Fatalf("not sized: %+v", r)
		}
		return applyPatch(t, raw, r.Patch), r
	}
	got, _ := review(runnerPod())
	if got.Spec.Resources == nil {
		t.Fatal("no spec.resources")
	}
	if q := got.Spec.Resources.Requests[corev1.ResourceCPU]; q.String() != "2" {
		t.Errorf("spec.resources.requests.cpu %s, want 2", q.String())
	}
	if _, ok := got.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; ok {
		t.Error("a container request too")
	}
	if want := "requests.cpu=2 on the pod (spec.resources) from VirtualMachine vm1 spec.guest.cpus.use"; got.Annotations[AnnotationSized] != want {
		t.Errorf("annotation %q, want %q", got.Annotations[AnnotationSized], want)
	}

	// Pod-level memory already there: kept, CPU added beside it.
	withMem := runnerPod()
	withMem.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}
	got, _ = review(withMem)
	if q := got.Spec.Resources.Requests[corev1.ResourceCPU]; q.String() != "2" {
		t.Errorf("with pod-level memory: requests.cpu %s", q.String())
	}
	if q := got.Spec.Resources.Limits[corev1.ResourceMemory]; q.String() != "2Gi" {
		t.Errorf("pod-level memory limit %s, want 2Gi kept", q.String())
	}

	ann := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"cgwarden.io/cpu": "500m"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	got, _ = review(ann)
	if got.Spec.Resources != nil {
		t.Errorf("an annotated pod sized at pod level: %+v", got.Spec.Resources)
	}
	if q := got.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; q.String() != "500m" {
		t.Errorf("annotated pod: container requests.cpu %s, want 500m", q.String())
	}
}

// runningPodLevel is a running runner pod sized at pod level: its request
// (and limit) on spec.resources, none on its container.
func runningPodLevel(req, limit string, conds ...corev1.PodCondition) *corev1.Pod {
	p := runningRunner("", "", conds...)
	p.Status.QOSClass = corev1.PodQOSBurstable
	p.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(req)}}
	if limit != "" {
		p.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limit)}
	}
	return p
}

// A pod with a pod-level CPU request is resized at pod level, by the
// same rules as a container's.
func TestDecideResizePodLevel(t *testing.T) {
	pending := corev1.PodCondition{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: "Infeasible", Message: "Node didn't have enough capacity"}
	memOnly := runningRunner("1", "")
	memOnly.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		vm       int64
		action   Action
		podLevel bool
		from, to int64
		reason   string
	}{
		{name: "equal", pod: runningPodLevel("1", ""), vm: 1000, action: ActNone, podLevel: true, from: 1000, to: 1000},
		{name: "grow", pod: runningPodLevel("1", ""), vm: 1500, action: ActResize, podLevel: true, from: 1000, to: 1500},
		{name: "cut to allocatable", pod: runningPodLevel("1", ""), vm: 8000, action: ActResize, podLevel: true, from: 1000, to: 4000, reason: "cut"},
		{name: "pod-level limit below", pod: runningPodLevel("1", "2"), vm: 3000, action: ActSkip, podLevel: true, reason: "limit 2 is below"},
		{name: "pending", pod: runningPodLevel("3", "", pending), vm: 3000, action: ActPending, podLevel: true, from: 3000, to: 3000, reason: "Infeasible"},
		{name: "pod-level memory only: the container's", pod: memOnly, vm: 2000, action: ActResize, from: 1000, to: 2000},
	} {
		d := DecideResize(tc.pod, tc.vm, 4000, vmsize.Bound{})
		if d.Action != tc.action || d.PodLevel != tc.podLevel || !strings.Contains(d.Reason, tc.reason) {
			t.Errorf("%s: %+v, want %s podLevel=%v %q", tc.name, d, tc.action, tc.podLevel, tc.reason)
			continue
		}
		if tc.action != ActSkip && (d.From != tc.from || d.To != tc.to) {
			t.Errorf("%s: %d → %d, want %d → %d", tc.name, d.From, d.To, tc.from, tc.to)
		}
		if d.PodLevel && (d.Container != "" || d.On() != "the pod") {
			t.Errorf("%s: on %q, container %q", tc.name, d.On(), d.Container)
		}
	}
	got := string(resizePatch(ResizeDecision{PodLevel: true, To: 1500}))
	if want := `{"spec":{"resources":{"requests":{"cpu":"1500m"}}}}`; got != want {
		t.Errorf("%s, want %s", got, want)
	}
}

// The controller resizes a pod sized at pod level through the resize
// subresource at pod level (the fake applies the strategic merge patch as
// the API server does): its spec.resources follows the VM, its container
// is left without a request, and the Event says "on the pod".
func TestControllerResizesAtPodLevel(t *testing.T) {
	p := runningPodLevel("1", "")
	cs := fake.NewClientset(p)
	var mu sync.Mutex
	var patches []string
	cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		patches = append(patches, string(a.(k8stesting.PatchAction).GetPatch()))
		mu.Unlock()
		return false, nil, nil
	})
	v := vm("1500m")
	_ = unstructured.SetNestedField(v.Object, p.Name, "status", "podName")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{VirtualMachines: "VirtualMachineList"}, v)
	events := record.NewFakeRecorder(10)
	c := &Controller{Client: cs, Dynamic: dyn, Events: events, Log: slog.New(slog.DiscardHandler), Coalesce: 20 * time.Millisecond,
		crdCheck: func() (bool, error) { return true, nil }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var got *corev1.Pod
	poll.Every(10*time.Millisecond).Until(t, 10*time.Second, "the pod's own request at 1500m", func() (bool, string, error) {
		var err error
		if got, err = cs.CoreV1().Pods("ns").Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
			return false, err.Error(), nil
		}
		q := got.Spec.Resources.Requests[corev1.ResourceCPU]
		return q.MilliValue() == 1500, "spec.resources.requests.cpu " + q.String(), nil
	})
	if _, ok := got.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; ok {
		t.Error("the container was given a request")
	}
	poll.Every(10*time.Millisecond).Until(t, 5*time.Second, "a CPUResized Event", func() (bool, string, error) { return len(events.Events) > 0, "none", nil })
	if e := <-events.Events; !strings.Contains(e, ReasonResized) || !strings.Contains(e, "1 → 1500m on the pod") {
		t.Errorf("Event %q", e)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(patches) != 1 || patches[0] != `{"spec":{"resources":{"requests":{"cpu":"1500m"}}}}` {
		t.Errorf("patches %q", patches)
	}
}
