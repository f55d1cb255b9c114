package sizer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// VMGetter reads a NeonVM VirtualMachine.
type VMGetter interface {
	GetVM(ctx context.Context, namespace, name string) (*unstructured.Unstructured, error)
}

// maxReviewBytes bounds an AdmissionReview body; the API server caps
// objects at about 3 MiB.
const maxReviewBytes = 8 << 20

// Webhook is the mutating admission webhook: POST an AdmissionReview
// (admission.k8s.io/v1) for a pod CREATE, get one back with a JSON patch or
// a warning.
type Webhook struct {
	VMs VMGetter
	Log *slog.Logger
	// Timeout bounds the VM lookup; the API server's own timeout for the
	// whole call is the webhook configuration's timeoutSeconds.
	Timeout time.Duration
	// Count, if set, counts decisions by result ("sized", "skipped",
	// "unsized").
	Count func(result string)
}

func (h *Webhook) count(r string) {
	if h.Count != nil {
		h.Count(r)
	}
}

// ServeHTTP implements http.Handler.
func (h *Webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil || len(body) > maxReviewBytes {
		http.Error(w, "AdmissionReview body unreadable or too large", http.StatusRequestEntityTooLarge)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	resp := h.Review(r.Context(), review.Request)
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	if out.APIVersion == "" {
		out.APIVersion, out.Kind = "admission.k8s.io/v1", "AdmissionReview"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// Review decides one admission request. It always allows the pod: a pod it
// cannot size is admitted unchanged, with a warning.
func (h *Webhook) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	log := h.Log.With("namespace", req.Namespace, "name", req.Name)
	if req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create || req.SubResource != "" {
		return resp
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		h.count("unsized")
		resp.Warnings = []string{"cgwarden sizer: pod not sized: cannot decode it: " + err.Error()}
		return resp
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	if pod.Name == "" {
		log = log.With("generateName", pod.GenerateName)
	}
	t, skip, warn := Find(&pod)
	if skip != "" {
		if warn {
			h.count("unsized")
			log.Warn("pod not sized", "reason", skip)
			resp.Warnings = []string{"cgwarden sizer: pod not sized: " + skip}
		} else {
			h.count("skipped")
			log.Debug("pod left alone", "reason", skip)
		}
		return resp
	}
	milli, err := h.size(ctx, pod.Namespace, t)
	if err != nil {
		h.count("unsized")
		log.Warn("pod not sized", "reason", err)
		resp.Warnings = []string{"cgwarden sizer: pod not sized: " + err.Error()}
		return resp
	}
	ops, err := Patch(&pod, t, milli)
	var patch []byte
	if err == nil {
		patch, err = marshalPatch(ops)
	}
	if err != nil {
		h.count("unsized")
		resp.Warnings = []string{"cgwarden sizer: pod not sized: " + err.Error()}
		return resp
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	h.count("sized")
	log.Info("pod sized", "container", t.ContainerName, "cpu", FormatMilli(milli), "source", t.Source, "vm", t.VMName)
	return resp
}

func (h *Webhook) size(ctx context.Context, namespace string, t Target) (int64, error) {
	if t.Source == SourceAnnotation {
		return AnnotationSize(t.Annotation)
	}
	if h.VMs == nil {
		return 0, fmt.Errorf("no VirtualMachine reader configured")
	}
	if h.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.Timeout)
		defer cancel()
	}
	vm, err := h.VMs.GetVM(ctx, namespace, t.VMName)
	if err != nil {
		return 0, fmt.Errorf("VirtualMachine %s/%s: %w", namespace, t.VMName, err)
	}
	return VMSize(vm)
}
