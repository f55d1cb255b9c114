package kubectlplugin

import (
	"fmt"
	"net/http"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
)

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// bearerToken is the bearer token cfg's credentials put on a request to
// the API server (a token, a token file, an exec or auth-provider
// plugin's token), "" when they carry none (a client certificate). The
// agent checks it with a TokenReview and a SubjectAccessReview (get on
// nodes/stats), as the kubelet checks the tokens it is sent: it is the
// user's own credential, sent only through the port-forward stream the
// API server opened with it.
func bearerToken(cfg *rest.Config) (string, error) {
	tc, err := cfg.TransportConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig credentials: %w", err)
	}
	var header string
	rt, err := transport.HTTPWrappersForConfig(tc, roundTripFunc(func(r *http.Request) (*http.Response, error) {
		header = r.Header.Get("Authorization")
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	}))
	if err != nil {
		return "", fmt.Errorf("kubeconfig credentials: %w", err)
	}
	req, err := http.NewRequest(http.MethodGet, "https://api.invalid/", nil)
	if err != nil {
		return "", err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return "", fmt.Errorf("kubeconfig credentials: %w", err)
	}
	resp.Body.Close()
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", nil
	}
	return strings.TrimSpace(token), nil
}

// noTokenHint says what to do when the agent refuses a request sent
// without a token.
const noTokenHint = "your kubeconfig's user signs in without a bearer token (a client certificate?), and the agent checks tokens (serve --authenticate): pass one with --token, e.g. --token=$(kubectl create token -n NS SA) for a ServiceAccount allowed get on nodes/stats"
