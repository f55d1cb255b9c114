package sizer

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// reviewOf is the AdmissionReview the API server sends for the CREATE of
// pod in namespace ns.
func reviewOf(t *testing.T, ns string, pod *corev1.Pod) admissionv1.AdmissionReview {
	return admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u-1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: ns,
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: mustJSON(t, pod)}},
	}
}

// post sends body to h, with its length or chunked (no Content-Length),
// and returns the status and the review answered (nil if none).
func post(t *testing.T, srv *httptest.Server, body []byte, chunked bool) (int, *admissionv1.AdmissionReview) {
	t.Helper()
	var r io.Reader = bytes.NewReader(body)
	if chunked {
		r = io.MultiReader(r) // no Len: sent chunked
	}
	resp, err := http.Post(srv.URL, "application/json", r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, &out
}

// The body bound is the API server's own request cap (3 MiB) and the
// review's envelope: a review of a pod as large as the API server takes
// is answered, and a body beyond what it could ever send is refused
// (413) whether it says its length or not. Before, 8 MiB were read.
func TestWebhookBodyBound(t *testing.T) {
	h := &Webhook{VMs: fakeVMs{"ns/vm1": vm(1.0)}, Log: slog.New(slog.DiscardHandler)}
	srv := httptest.NewServer(h)
	defer srv.Close()
	sized := func(pad int) []byte {
		p := runnerPod()
		p.Annotations = map[string]string{"pad": strings.Repeat("a", pad)}
		return mustJSON(t, reviewOf(t, "ns", p))
	}
	big := sized(3<<20 - 4096) // a pod of just under 3 MiB
	for _, chunked := range []bool{false, true} {
		code, out := post(t, srv, big, chunked)
		if code != http.StatusOK || out == nil || out.Response == nil || out.Response.Patch == nil {
			t.Errorf("a %d-byte review (chunked %v): %d, want sized", len(big), chunked, code)
		}
	}
	huge := sized(4 << 20) // more than the API server accepts in a request
	for _, chunked := range []bool{false, true} {
		if code, _ := post(t, srv, huge, chunked); code != http.StatusRequestEntityTooLarge {
			t.Errorf("a %d-byte body (chunked %v): %d, want 413", len(huge), chunked, code)
		}
	}
}

// recordingVMs records the namespaces looked up.
type recordingVMs struct {
	fakeVMs
	mu  sync.Mutex
	nss []string
}

func (r *recordingVMs) GetVM(ctx context.Context, ns, name string) (*unstructured.Unstructured, error) {
	r.mu.Lock()
	r.nss = append(r.nss, ns)
	r.mu.Unlock()
	return r.fakeVMs.GetVM(ctx, ns, name)
}

// The webhook answers only about the pod under review, in the namespace
// of the request: a review whose object names another namespace (which
// the API server never sends: it checks that they agree before admission)
// gets no size and no lookup there, and nothing of the other namespace's
// VM in its patch or warnings. Before, the object's namespace was looked
// up and its VM's size returned.
func TestWebhookLooksUpOnlyTheRequestNamespace(t *testing.T) {
	vms := &recordingVMs{fakeVMs: fakeVMs{"ns/vm1": vm(1.0), "victim/vm1": vm(7.0)}}
	h := &Webhook{VMs: vms, Log: slog.New(slog.DiscardHandler)}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, c := range []struct {
		name         string
		reqNS, podNS string
		wantCPU      string
	}{
		{"object in another namespace", "ns", "victim", ""},
		{"no namespace in the request", "", "victim", ""},
		{"object without a namespace", "ns", "", "1"},
		{"the same namespace", "ns", "ns", "1"},
	} {
		vms.nss = nil
		p := runnerPod()
		p.Namespace = c.podNS
		code, out := post(t, srv, mustJSON(t, reviewOf(t, c.reqNS, p)), false)
		if code != http.StatusOK || out.Response == nil || !out.Response.Allowed {
			t.Fatalf("%s: %d %+v", c.name, code, out)
		}
		r := out.Response
		got := ""
		if r.Patch != nil {
			got = applyPatch(t, mustJSON(t, runnerPod()), r.Patch).Spec.Containers[0].Resources.Requests.Cpu().String()
		}
		if got != c.wantCPU {
			t.Errorf("%s: sized %q, want %q", c.name, got, c.wantCPU)
		}
		for _, ns := range vms.nss {
			if ns != c.reqNS || c.reqNS == "" {
				t.Errorf("%s: looked up a VM in namespace %q (the request's: %q)", c.name, ns, c.reqNS)
			}
		}
		for _, w := range r.Warnings {
			if strings.Contains(w, "victim") || strings.Contains(w, "7") {
				t.Errorf("%s: the warning tells of the other namespace: %q", c.name, w)
			}
		}
		if c.wantCPU == "" && len(r.Warnings) == 0 {
			t.Errorf("%s: not sized, and no warning saying why", c.name)
		}
	}
}
