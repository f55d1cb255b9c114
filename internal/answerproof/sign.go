package answerproof

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/cgwarden/cgwarden/internal/apiconn"
)

// Minter has the API server mint a token of a pod's ServiceAccount, bound
// to that pod, for one audience.
type Minter interface {
	Mint(ctx context.Context, audience string) (string, error)
}

// APIMinter is a Minter backed by the API server's TokenRequest: create
// on serviceaccounts/token of the pod's own ServiceAccount.
type APIMinter struct {
	core rest.Interface
	pod  Pod
}

var _ Minter = (*APIMinter)(nil)

// NewAPIMinter mints tokens of pod's ServiceAccount bound to pod.
func NewAPIMinter(cfg *rest.Config, pod Pod) (*APIMinter, error) {
	if pod.Namespace == "" || pod.Name == "" || pod.UID == "" || pod.ServiceAccount == "" {
		return nil, fmt.Errorf("the agent's own pod is not known (namespace %q, name %q, uid %q, service account %q): set POD_NAMESPACE, POD_NAME, POD_UID and POD_SERVICE_ACCOUNT from the downward API", pod.Namespace, pod.Name, pod.UID, pod.ServiceAccount)
	}
	// TokenRequest is an authentication.k8s.io type served under core
	// v1's serviceaccounts/token: a core client whose scheme holds the
	// authentication types.
	c, err := apiconn.Client(cfg, schema.GroupVersion{Version: "v1"}, authnv1.AddToScheme)
	if err != nil {
		return nil, err
	}
	return &APIMinter{core: c, pod: pod}, nil
}

// Mint implements Minter.
func (m *APIMinter) Mint(ctx context.Context, audience string) (string, error) {
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences:         []string{audience},
		ExpirationSeconds: ptr.To[int64](TokenSeconds),
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: m.pod.Name, UID: types.UID(m.pod.UID)},
	}}
	out := &authnv1.TokenRequest{}
	err := m.core.Post().Namespace(m.pod.Namespace).Resource("serviceaccounts").Name(m.pod.ServiceAccount).SubResource("token").
		VersionedParams(&metav1.CreateOptions{}, metav1.ParameterCodec).Body(tr).Do(ctx).Into(out)
	if err != nil {
		return "", fmt.Errorf("a token of %s bound to pod %s: %w", ServiceAccountUser(m.pod.Namespace, m.pod.ServiceAccount), m.pod, err)
	}
	return out.Status.Token, nil
}

// maxAnswer bounds an answer held to be signed (what the plugin takes).
const maxAnswer = 64 << 20

// Sign wraps h (the loopback listener's handler, behind its
// authentication: only readers get a token minted) so that an answer to
// a request with a challenge carries an answer token (AnswerHeader) for
// AnswerAudience of the challenge, the path and the body. h's answer is
// held whole to be digested; a 200 that cannot be signed becomes a 503
// (an unsigned answer is one the plugin refuses anyway), other statuses
// pass unsigned.
func Sign(h http.Handler, m Minter, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		challenge := r.Header.Get(ChallengeHeader)
		if challenge == "" {
			h.ServeHTTP(w, r)
			return
		}
		if err := CheckChallenge(challenge); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rec := &held{header: http.Header{}, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		if rec.code == http.StatusOK {
			if rec.over {
				http.Error(w, fmt.Sprintf("the answer is over %d MiB", maxAnswer>>20), http.StatusInternalServerError)
				return
			}
			token, err := m.Mint(r.Context(), AnswerAudience(challenge, r.URL.RequestURI(), rec.body.Bytes()))
			if err != nil {
				log.Warn("could not sign an answer on the loopback listener", "path", r.URL.Path, "err", err)
				http.Error(w, "signing the answer: the API server did not mint the agent's answer token", http.StatusServiceUnavailable)
				return
			}
			rec.header.Set(AnswerHeader, token)
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Length", strconv.Itoa(rec.body.Len()))
		w.WriteHeader(rec.code)
		_, _ = w.Write(rec.body.Bytes())
	})
}

// held is an http.ResponseWriter that keeps the answer (up to
// maxAnswer).
type held struct {
	header      http.Header
	code        int
	wroteHeader bool
	body        bytes.Buffer
	over        bool
}

func (h *held) Header() http.Header { return h.header }

func (h *held) WriteHeader(code int) {
	if !h.wroteHeader {
		h.code, h.wroteHeader = code, true
	}
}

func (h *held) Write(b []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	if h.body.Len()+len(b) > maxAnswer {
		h.over = true
		return 0, fmt.Errorf("answer over %d MiB", maxAnswer>>20)
	}
	return h.body.Write(b)
}
