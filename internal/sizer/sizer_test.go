package sizer

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/vmsize"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// runnerPod is shaped like a NeonVM runner pod as the neonvm controller
// makes it: owned by its VirtualMachine, labelled with its name, one
// neonvm-runner container, no requests (spec.podResources empty).
func runnerPod() *corev1.Pod {
	ctrl := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "vm1-abcde", Namespace: "ns",
			Labels: map[string]string{"vm.neon.tech/name": "vm1"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "vm.neon.tech/v1", Kind: "VirtualMachine", Name: "vm1", UID: "u", Controller: &ctrl,
			}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "neonvm-runner", Image: "runner"}}},
	}
}

func TestFind(t *testing.T) {
	cpu := func(p *corev1.Pod, q string) *corev1.Pod {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
		return p
	}
	tests := []struct {
		name      string
		pod       func() *corev1.Pod
		source    Source
		vm        string
		container string
		skip      string // substring
		warn      bool
	}{
		{name: "runner by owner", pod: runnerPod, source: SourceNeonVM, vm: "vm1", container: "neonvm-runner"},
		{name: "runner by label only", pod: func() *corev1.Pod { p := runnerPod(); p.OwnerReferences = nil; return p }, source: SourceNeonVM, vm: "vm1", container: "neonvm-runner"},
		{name: "owner wins over label", pod: func() *corev1.Pod { p := runnerPod(); p.Labels["vm.neon.tech/name"] = "other"; return p }, source: SourceNeonVM, vm: "vm1", container: "neonvm-runner"},
		{name: "runner among sidecars", pod: func() *corev1.Pod {
			p := runnerPod()
			p.Spec.Containers = append([]corev1.Container{{Name: "sidecar"}}, p.Spec.Containers...)
			return p
		}, source: SourceNeonVM, vm: "vm1", container: "neonvm-runner"},
		{name: "runner already requests CPU", pod: func() *corev1.Pod { return cpu(runnerPod(), "250m") }, skip: "already requests CPU"},
		{name: "runner with a CPU limit", pod: func() *corev1.Pod {
			p := runnerPod()
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
			return p
		}, skip: "already requests CPU"},
		{name: "annotated single container", pod: func() *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{vmsize.AnnotationCPU: "2"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "qemu"}}}}
		}, source: SourceAnnotation, container: "qemu"},
		{name: "annotated, container named", pod: func() *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{vmsize.AnnotationCPU: "2", vmsize.AnnotationContainer: "vm"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "log"}, {Name: "vm"}}}}
		}, source: SourceAnnotation, container: "vm"},
		{name: "annotated, two containers, none named", pod: func() *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{vmsize.AnnotationCPU: "2"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "log"}, {Name: "vm"}}}}
		}, skip: "none named neonvm-runner", warn: true},
		{name: "annotated, named container missing", pod: func() *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{vmsize.AnnotationCPU: "2", vmsize.AnnotationContainer: "nope"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vm"}}}}
		}, skip: `names container "nope"`, warn: true},
		{name: "kubevirt virt-launcher with requests", pod: func() *corev1.Pod {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"kubevirt.io/domain": "vmi1", "kubevirt.io": "virt-launcher"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "compute"}}}}
			return cpu(p, "100m")
		}, skip: "KubeVirt"},
		{name: "kubevirt without requests is still KubeVirt's", pod: func() *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: "vmi1"}}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "compute"}}}}
		}, skip: "KubeVirt"},
		{name: "plain pod", pod: func() *corev1.Pod {
			return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
		}, skip: "not a VM pod"},
		{name: "other group's VirtualMachine", pod: func() *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "VirtualMachine", Name: "x"}}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
		}, skip: "not a VM pod"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, skip, warn := Find(tt.pod())
			if tt.skip != "" {
				if !strings.Contains(skip, tt.skip) || warn != tt.warn {
					t.Fatalf("skip %q warn %v, want %q warn %v", skip, warn, tt.skip, tt.warn)
				}
				return
			}
			if skip != "" {
				t.Fatalf("skipped: %s", skip)
			}
			if got.Source != tt.source || got.VMName != tt.vm || got.ContainerName != tt.container {
				t.Fatalf("got %+v", got)
			}
		})
	}
}

func vm(use any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": "vm1", "namespace": "ns"},
		"spec":     map[string]any{"guest": map[string]any{"cpus": map[string]any{"min": 0.25, "max": 4.0}}},
	}}
	if use != nil {
		_ = unstructured.SetNestedField(u.Object, use, "spec", "guest", "cpus", "use")
	}
	return u
}

// TestVMRequestSize: the size the webhook requests for a NeonVM pod,
// vmsize's Request mode.
func TestVMRequestSize(t *testing.T) {
	tests := []struct {
		use  any
		want int64
		err  string
	}{
		{use: 1.0, want: 1000},
		{use: int64(3), want: 3000},
		{use: "250m", want: 250},
		{use: 0.5, want: 500},
		{use: nil, err: "no spec.guest.cpus.use"},
		{use: -1.0, err: "negative"},
		{use: "-2", err: "negative"},
		{use: 0.0, want: 250},  // held within min,
		{use: 1e9, want: 4000}, // and max, as the agent holds it
		{use: "9e2337203372", err: "too large an exponent"},
		{use: "lots", err: "quantity"},
		{use: true, err: "neither"},
	}
	for _, tt := range tests {
		v, err := vmsize.FromObject(vm(tt.use).Object, vmsize.Request)
		got := v.MilliCPU
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("use %v: err %v, want %q", tt.use, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("use %v: %d, %v; want %d", tt.use, got, err, tt.want)
		}
	}
}

func TestAnnotationSize(t *testing.T) {
	for in, want := range map[string]int64{"2": 2000, "500m": 500, " 1.5 ": 1500} {
		if got, err := AnnotationSize(in); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "x", "100000"} {
		if _, err := AnnotationSize(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// applyPatch applies ops to the pod's JSON as the API server would.
func applyPatch(t *testing.T, raw []byte, patch []byte) *corev1.Pod {
	t.Helper()
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("apply %s to %s: %v", patch, raw, err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(out, &pod); err != nil {
		t.Fatal(err)
	}
	return &pod
}

func TestPatch(t *testing.T) {
	// With and without annotations, with limits and other requests that
	// must survive, and with the resources member absent from the JSON.
	limited := runnerPod()
	limited.Annotations = map[string]string{"keep": "me"}
	limited.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
	limited.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}
	for name, raw := range map[string][]byte{
		"bare":        mustJSON(t, runnerPod()),
		"with limits": mustJSON(t, limited),
		"no resources member": []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","ownerReferences":[{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","name":"vm1","uid":"u"}]},` +
			`"spec":{"containers":[{"name":"neonvm-runner","image":"r"}]}}`),
	} {
		t.Run(name, func(t *testing.T) {
			var pod corev1.Pod
			if err := json.Unmarshal(raw, &pod); err != nil {
				t.Fatal(err)
			}
			tg, skip, _ := Find(&pod)
			if skip != "" {
				t.Fatal(skip)
			}
			ops, err := Patch(&pod, tg, 1500)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := marshalPatch(ops)
			got := applyPatch(t, raw, b)
			c := got.Spec.Containers[0].Resources
			if q := c.Requests[corev1.ResourceCPU]; q.MilliValue() != 1500 || q.String() != "1500m" {
				t.Errorf("requests.cpu %s", q.String())
			}
			if _, ok := c.Limits[corev1.ResourceCPU]; ok {
				t.Error("a CPU limit was set")
			}
			for k, v := range pod.Spec.Containers[0].Resources.Requests {
				if got := c.Requests[k]; got.Cmp(v) != 0 {
					t.Errorf("requests.%s %s, was %s", k, got.String(), v.String())
				}
			}
			for k, v := range pod.Spec.Containers[0].Resources.Limits {
				if got := c.Limits[k]; got.Cmp(v) != 0 {
					t.Errorf("limits.%s %s, was %s", k, got.String(), v.String())
				}
			}
			for k, v := range pod.Annotations {
				if got.Annotations[k] != v {
					t.Errorf("annotation %s lost", k)
				}
			}
			if want := "requests.cpu=1500m on container neonvm-runner from VirtualMachine vm1 spec.guest.cpus.use"; got.Annotations[AnnotationSized] != want {
				t.Errorf("annotation %q, want %q", got.Annotations[AnnotationSized], want)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type fakeVMs map[string]*unstructured.Unstructured

func (f fakeVMs) GetVM(_ context.Context, ns, name string) (*unstructured.Unstructured, error) {
	if u, ok := f[ns+"/"+name]; ok {
		return u, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "vm.neon.tech", Resource: "virtualmachines"}, name)
}

func TestReview(t *testing.T) {
	h := &Webhook{VMs: fakeVMs{"ns/vm1": vm(2.0), "ns/bad": vm(-1.0)}, Log: slog.New(slog.DiscardHandler)}
	review := func(p *corev1.Pod) *admissionv1.AdmissionResponse {
		return h.Review(context.Background(), &admissionv1.AdmissionRequest{
			UID: "r1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: "ns",
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: mustJSON(t, p)},
		})
	}
	r := review(runnerPod())
	if !r.Allowed || r.UID != "r1" || r.PatchType == nil || len(r.Warnings) != 0 {
		t.Fatalf("sized: %+v", r)
	}
	if got := applyPatch(t, mustJSON(t, runnerPod()), r.Patch).Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; got.String() != "2" {
		t.Fatalf("requests.cpu %s", got.String())
	}
	for name, owner := range map[string]string{"missing VM": "gone", "negative use": "bad"} {
		p := runnerPod()
		p.OwnerReferences[0].Name = owner
		r := review(p)
		if !r.Allowed || r.Patch != nil || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "not sized") {
			t.Errorf("%s: %+v", name, r)
		}
		t.Logf("%s: %s", name, r.Warnings)
	}
	p := runnerPod()
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	if r := review(p); !r.Allowed || r.Patch != nil || len(r.Warnings) != 0 {
		t.Errorf("pod with requests: %+v", r)
	}
}

// The HTTP handler: an AdmissionReview in, the same UID and apiVersion out
// with a JSON patch; anything but a POSTed review is refused.
func TestWebhookHTTP(t *testing.T) {
	h := &Webhook{VMs: fakeVMs{"ns/vm1": vm(1.0)}, Log: slog.New(slog.DiscardHandler)}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u-1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: "ns",
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: mustJSON(t, runnerPod())}},
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(mustJSON(t, review)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil ||
		out.Response.UID != "u-1" || !out.Response.Allowed || *out.Response.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("%+v", out)
	}
	for _, bad := range []struct {
		method, body string
		code         int
	}{{"GET", "", 405}, {"POST", "{", 400}, {"POST", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, 400}} {
		req, _ := http.NewRequest(bad.method, srv.URL, strings.NewReader(bad.body))
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != bad.code {
			t.Errorf("%s %q: %d, want %d", bad.method, bad.body, r.StatusCode, bad.code)
		}
	}
}
