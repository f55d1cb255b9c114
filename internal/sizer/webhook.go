package sizer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// VMGetter reads a NeonVM VirtualMachine.
type VMGetter interface {
	GetVM(ctx context.Context, namespace, name string) (*unstructured.Unstructured, error)
}

// maxReviewBytes bounds an AdmissionReview body. The API server refuses
// a request body above 3 MiB (its MaxRequestBodyBytes, the default of
// kube-apiserver's --max-resource-write-bytes), so the pod a client sent
// is at most that much JSON; the review wraps it once (object, with
// oldObject null on CREATE) with userInfo and a few fields, for which 256
// KiB is ample. etcd's default limit (1.5 MiB, --max-request-bytes) would
// bound it further, but it counts the stored protobuf, not the JSON the
// webhook is sent, and admission comes before storage: the request cap is
// the bound the API server itself guarantees. A larger body is no review
// the API server sends.
const maxReviewBytes = 3<<20 + 256<<10

// defaultInFlight bounds the reviews read, decoded and answered at once:
// each may hold maxReviewBytes of body and about twice that decoded
// (review, then pod), so 8 cap the webhook's share of the sizer's memory
// near 80 MiB whoever calls: the container's limit (640Mi in the
// manifests) holds that beside the resize controller's cache at 20,000
// VMs (a 435 MiB peak measured, docs/scale.md). A VM pod's review is a
// few KiB and answered in milliseconds (one VM GET), so 8 at once serve
// hundreds of VM pod creations a second.
const defaultInFlight = 8

// slotWait is how long a review waits for one of the InFlight slots
// before it is refused (429; failurePolicy Ignore admits the pod
// unsized), well within the API server's timeoutSeconds (5).
const slotWait = time.Second

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
	// "unsized"; "refused": a request no API server sends, too large,
	// unreadable or naming two namespaces, or one over the InFlight
	// bound).
	Count func(result string)
	// InFlight bounds the reviews handled at once (0: defaultInFlight).
	// /mutate answers whoever reaches the port, not only the API server,
	// and the bound holds memory and lookups whatever the callers do. The
	// VM lookups have a budget of their own besides (Run gives VMs a
	// client of its own, with its own rate limiter): callers of /mutate
	// never spend the resize controller's.
	InFlight int
	// Level is where a NeonVM runner pod's request goes (ProbeLevel;
	// "": LevelContainer). A pod annotated cgwarden.io/cpu keeps its
	// container request: its annotations may name the container, and no
	// controller resizes it.
	Level Level
	// MaxSizes is --max-size: a request above the bound of the pod's
	// namespace is set at the bound, with a warning saying so. (The
	// node's allocatable CPU is not known at admission: the pod is not
	// scheduled yet; the resize controller holds the request to it.)
	MaxSizes vmsize.MaxSizes

	once  sync.Once
	slots chan struct{}
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
	if r.ContentLength > maxReviewBytes {
		h.count("refused")
		http.Error(w, "AdmissionReview body too large", http.StatusRequestEntityTooLarge)
		return
	}
	h.once.Do(func() {
		n := h.InFlight
		if n <= 0 {
			n = defaultInFlight
		}
		h.slots = make(chan struct{}, n)
	})
	wait := time.NewTimer(slotWait)
	select {
	case h.slots <- struct{}{}:
		wait.Stop()
		defer func() { <-h.slots }()
	case <-wait.C:
		h.count("refused")
		http.Error(w, "too many AdmissionReviews at once", http.StatusTooManyRequests)
		return
	case <-r.Context().Done():
		wait.Stop()
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReviewBytes))
	if err != nil {
		h.count("refused")
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
	// notSized admits the pod unchanged, counted as result, with a
	// warning saying why.
	notSized := func(result, why string) *admissionv1.AdmissionResponse {
		h.count(result)
		resp.Warnings = []string{"cgwarden sizer: pod not sized: " + why}
		return resp
	}
	if req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create || req.SubResource != "" {
		return resp
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return notSized("unsized", "cannot decode it: "+err.Error())
	}
	// The request's namespace, never the object's: the API server
	// checks that they agree before admission, so a review where they
	// differ was not sent by it, and the sizer looks up VMs only in the
	// namespace of the pod under review. A caller that forges a whole
	// review can still name a namespace; what it learns is bounded by
	// who can reach the port (docs/security.md).
	switch {
	case req.Namespace == "":
		return notSized("refused", "the request names no namespace")
	case pod.Namespace != "" && pod.Namespace != req.Namespace:
		log.Warn("pod not sized: its namespace is not the request's", "podNamespace", pod.Namespace)
		return notSized("refused", "its namespace is not the request's")
	}
	pod.Namespace = req.Namespace
	if pod.Name == "" {
		log = log.With("generateName", pod.GenerateName)
	}
	t, skip, warn := Find(&pod)
	if skip != "" && warn {
		log.Warn("pod not sized", "reason", skip)
		return notSized("unsized", skip)
	}
	if skip != "" {
		h.count("skipped")
		log.Debug("pod left alone", "reason", skip)
		return resp
	}
	t.PodLevel = h.Level == LevelPod && t.Source == SourceNeonVM
	milli, err := h.size(ctx, pod.Namespace, t)
	if err != nil {
		log.Warn("pod not sized", "reason", err)
		return notSized("unsized", err.Error())
	}
	// The node is not known at admission (the pod is not scheduled):
	// only the namespace's bound holds here; the resize controller holds
	// the request to the node's allocatable CPU too.
	if to, cut := capped(milli, 0, h.MaxSizes.For(pod.Namespace)); cut != "" {
		why := fmt.Sprintf("%s %s %s", t.sizeOf(), vmsize.FormatMilli(milli), cut)
		resp.Warnings = []string{"cgwarden sizer: " + why}
		log = log.With("reason", why)
		milli = to
	}
	ops, err := Patch(&pod, t, milli)
	var patch []byte
	if err == nil {
		patch, err = marshalPatch(ops)
	}
	if err != nil {
		return notSized("unsized", err.Error())
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	h.count("sized")
	where := "container " + t.ContainerName
	if t.PodLevel {
		where = "pod"
	}
	log.Info("pod sized", "on", where, "cpu", vmsize.FormatMilli(milli), "source", t.Source, "vm", t.VMName)
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
	// The size policy's Request mode: spec.guest.cpus.use within .min and
	// .max. Unlike the agent's weights it does not fall back to max or
	// min: a request is a promise to the scheduler, so only the size the
	// VM runs at now is used; a VM without one is not sized.
	v, err := vmsize.FromObject(vm.Object, vmsize.Request)
	return v.MilliCPU, err
}
