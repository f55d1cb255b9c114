package serve

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
)

// Reviewer asks the API server who a bearer token is and whether that user
// may do something: the TokenReview and SubjectAccessReview the kubelet's
// own authenticator and authorizer use.
type Reviewer interface {
	// Authenticate returns the token's user; ok is false for a token the
	// API server does not accept.
	Authenticate(ctx context.Context, token string) (user authnv1.UserInfo, ok bool, err error)
	// Authorize tells whether user may get the node's subresource
	// (nodes/metrics, nodes/stats) and, when not, why.
	Authorize(ctx context.Context, user authnv1.UserInfo, node, subresource string) (allowed bool, reason string, err error)
}

// APIReviewer is a Reviewer backed by the API server.
type APIReviewer struct {
	authn authnclient.TokenReviewInterface
	authz authzclient.SubjectAccessReviewInterface
}

var _ Reviewer = (*APIReviewer)(nil)

// NewAPIReviewer builds a Reviewer from a client configuration (the
// agent's ServiceAccount needs create on tokenreviews and
// subjectaccessreviews). Only the two API groups' clients are made: the
// agent does not link the whole typed clientset.
func NewAPIReviewer(cfg *rest.Config) (*APIReviewer, error) {
	an, err := authnclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	az, err := authzclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &APIReviewer{authn: an.TokenReviews(), authz: az.SubjectAccessReviews()}, nil
}

// Authenticate implements Reviewer.
func (a *APIReviewer) Authenticate(ctx context.Context, token string) (authnv1.UserInfo, bool, error) {
	r, err := a.authn.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return authnv1.UserInfo{}, false, err
	}
	return r.Status.User, r.Status.Authenticated, nil
}

// Authorize implements Reviewer.
func (a *APIReviewer) Authorize(ctx context.Context, u authnv1.UserInfo, node, sub string) (bool, string, error) {
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	r, err := a.authz.Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		ResourceAttributes: &authzv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: sub, Name: node},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, "", err
	}
	return r.Status.Allowed, r.Status.Reason, nil
}

// Cache times of decisions, the kubelet's defaults
// (--authentication-token-webhook-cache-ttl 2m,
// --authorization-webhook-cache-authorized-ttl 5m, -unauthorized-ttl 30s).
const (
	authnTTL   = 2 * time.Minute
	allowedTTL = 5 * time.Minute
	deniedTTL  = 30 * time.Second
	// maxCached bounds each cache: a flood of made-up tokens cannot grow
	// it without end (it is emptied when full).
	maxCached = 4096
)

type decision struct {
	ok     bool
	user   authnv1.UserInfo
	reason string
	until  time.Time
}

// Auth guards the data endpoints like the kubelet guards its own: a
// bearer token, accepted only if a TokenReview says it is valid and a
// SubjectAccessReview allows get on nodes/metrics (/metrics,
// /metrics/resource) or nodes/stats (/stats/…, /audit, /inspect) of this
// node. No token or a
// bad one: 401; a user without the permission: 403; the API server
// unreachable: 503 (never a silent allow). /healthz and /readyz stay open
// for the kubelet's probes.
type Auth struct {
	Reviewer Reviewer
	Node     string
	Log      *slog.Logger
	Now      func() time.Time

	mu    sync.Mutex
	authn map[[32]byte]decision
	authz map[string]decision
}

// subresource is the node subresource a path needs ("" for open paths).
func subresource(path string) string {
	switch {
	case path == "/healthz" || path == "/readyz":
		return ""
	case strings.HasPrefix(path, "/stats"), path == "/audit", path == "/inspect":
		// The audit and the inventory show what /stats/summary shows
		// (the node's pods, their cgroups and usage), so they ask for
		// what a stats reader holds, not nodes/proxy (the kubelet's
		// permission for everything else, exec included).
		return "stats"
	}
	return "metrics"
}

// Wrap returns h behind the checks.
func (a *Auth) Wrap(h http.Handler) http.Handler {
	if a.Now == nil {
		a.Now = time.Now
	}
	if a.Log == nil {
		a.Log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sub := subresource(r.URL.Path)
		if sub == "" {
			h.ServeHTTP(w, r)
			return
		}
		token, ok := bearer(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cgwarden"`)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		user, ok, err := a.authenticate(r.Context(), token)
		if err != nil {
			a.Log.Warn("token review failed", "err", err)
			http.Error(w, "authentication unavailable", http.StatusServiceUnavailable)
			return
		}
		if !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		allowed, reason, err := a.authorize(r.Context(), user, sub)
		if err != nil {
			a.Log.Warn("subject access review failed", "err", err)
			http.Error(w, "authorization unavailable", http.StatusServiceUnavailable)
			return
		}
		if !allowed {
			msg := "Forbidden (user=" + user.Username + ", verb=get, resource=nodes, subresource=" + sub + ")"
			if reason != "" {
				msg += ": " + reason
			}
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

func (a *Auth) authenticate(ctx context.Context, token string) (authnv1.UserInfo, bool, error) {
	key := sha256.Sum256([]byte(token)) // the cache keeps no token
	now := a.Now()
	a.mu.Lock()
	if d, ok := a.authn[key]; ok && now.Before(d.until) {
		a.mu.Unlock()
		return d.user, d.ok, nil
	}
	a.mu.Unlock()
	user, ok, err := a.Reviewer.Authenticate(ctx, token)
	if err != nil {
		return user, false, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.authn == nil || len(a.authn) >= maxCached {
		a.authn = map[[32]byte]decision{}
	}
	a.authn[key] = decision{ok: ok, user: user, until: now.Add(authnTTL)}
	return user, ok, nil
}

func (a *Auth) authorize(ctx context.Context, u authnv1.UserInfo, sub string) (bool, string, error) {
	key := u.Username + "\x00" + u.UID + "\x00" + strings.Join(u.Groups, "\x00") + "\x00" + sub
	now := a.Now()
	a.mu.Lock()
	if d, ok := a.authz[key]; ok && now.Before(d.until) {
		a.mu.Unlock()
		return d.ok, d.reason, nil
	}
	a.mu.Unlock()
	ok, reason, err := a.Reviewer.Authorize(ctx, u, a.Node, sub)
	if err != nil {
		return false, "", err
	}
	ttl := deniedTTL
	if ok {
		ttl = allowedTTL
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.authz == nil || len(a.authz) >= maxCached {
		a.authz = map[string]decision{}
	}
	a.authz[key] = decision{ok: ok, reason: reason, until: now.Add(ttl)}
	return ok, reason, nil
}
