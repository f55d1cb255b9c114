package serve

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	"k8s.io/utils/lru"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/rest"

	"github.com/cgwarden/cgwarden/internal/apiconn"
)

// Reviewer asks the API server who a bearer token is and whether that user
// may do something: the TokenReview and SubjectAccessReview the kubelet's
// own authenticator and authorizer use.
type Reviewer interface {
	// Authenticate returns the token's user; ok is false for a token the
	// API server does not accept, or, when audience is not "", does not
	// accept for that audience ("": the API server's own audiences).
	Authenticate(ctx context.Context, token, audience string) (user authnv1.UserInfo, ok bool, err error)
	// Authorize tells whether user may get the node's subresource
	// (nodes/metrics, nodes/stats) and, when not, why.
	Authorize(ctx context.Context, user authnv1.UserInfo, node, subresource string) (allowed bool, reason string, err error)
}

// APIReviewer is a Reviewer backed by the API server: a POST of a
// TokenReview or a SubjectAccessReview, what the typed clients'
// Create does, over clients whose schemes hold only those two groups
// (apiconn.Client says why the typed clients are not used).
type APIReviewer struct {
	authn, authz rest.Interface
}

var _ Reviewer = (*APIReviewer)(nil)

// NewAPIReviewer builds a Reviewer from a client configuration (the
// agent's ServiceAccount needs create on tokenreviews and
// subjectaccessreviews).
func NewAPIReviewer(cfg *rest.Config) (*APIReviewer, error) {
	an, err := apiconn.Client(cfg, authnv1.SchemeGroupVersion, authnv1.AddToScheme)
	if err != nil {
		return nil, err
	}
	az, err := apiconn.Client(cfg, authzv1.SchemeGroupVersion, authzv1.AddToScheme)
	if err != nil {
		return nil, err
	}
	return &APIReviewer{authn: an, authz: az}, nil
}

// Authenticate implements Reviewer.
func (a *APIReviewer) Authenticate(ctx context.Context, token, audience string) (authnv1.UserInfo, bool, error) {
	spec := authnv1.TokenReviewSpec{Token: token}
	if audience != "" {
		spec.Audiences = []string{audience}
	}
	r := &authnv1.TokenReview{}
	if err := a.authn.Post().Resource("tokenreviews").Body(&authnv1.TokenReview{Spec: spec}).Do(ctx).Into(r); err != nil {
		return authnv1.UserInfo{}, false, err
	}
	ok := r.Status.Authenticated && (audience == "" || slices.Contains(r.Status.Audiences, audience))
	return r.Status.User, ok, nil
}

// Authorize implements Reviewer.
func (a *APIReviewer) Authorize(ctx context.Context, u authnv1.UserInfo, node, sub string) (bool, string, error) {
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	r := &authzv1.SubjectAccessReview{}
	err := a.authz.Post().Resource("subjectaccessreviews").Body(&authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		ResourceAttributes: &authzv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: sub, Name: node},
	}}).Do(ctx).Into(r)
	if err != nil {
		return false, "", err
	}
	return r.Status.Allowed, r.Status.Reason, nil
}

// Cache times of decisions, the kubelet's defaults
// (--authentication-token-webhook-cache-ttl 2m for a token, accepted or
// not; --authorization-webhook-cache-authorized-ttl 5m,
// -unauthorized-ttl 30s for an access review).
const (
	authnTTL   = 2 * time.Minute
	allowedTTL = 5 * time.Minute
	deniedTTL  = 30 * time.Second
	// maxCached bounds each cache (least recently used entries go
	// first). Tokens the API server refused are kept apart from those it
	// accepted: a flood of made-up tokens only ever evicts other made-up
	// tokens, never a scraper's.
	maxCached = 4096
)

// Limits on what one request may cost the API server.
const (
	// MaxTokenBytes: a longer bearer token is refused without a review
	// (a ServiceAccount token is about 1 KiB, an OIDC token a few).
	MaxTokenBytes = 8 << 10
	// DefaultMaxReviews bounds the reviews (TokenReview and
	// SubjectAccessReview together) waiting on the API server at once;
	// a request that would need one more is answered 429.
	DefaultMaxReviews = 8
	// reservedReviews of them are kept for renewing what is already
	// trusted (a token the API server accepted before, an access review
	// of an authenticated user): tokens never seen valid cannot take
	// them, so a steady scraper's renewal gets through a flood.
	reservedReviews = 2
	// DefaultReviewTimeout bounds each review.
	DefaultReviewTimeout = 5 * time.Second
	// retryAfter is the Retry-After of a 429, in seconds.
	retryAfter = "1"
)

// errBusy: every review slot is taken.
var errBusy = errors.New("too many reviews in flight")

type authnDecision struct {
	user  authnv1.UserInfo
	until time.Time
}

type authzDecision struct {
	ok     bool
	reason string
	until  time.Time
}

// Auth guards the data endpoints like the kubelet guards its own: a
// bearer token, accepted only if a TokenReview says it is valid and a
// SubjectAccessReview allows get on nodes/metrics (/metrics,
// /metrics/resource) or nodes/stats (/stats/…, /audit, /inspect) of this
// node. No token or a bad one: 401; a user without the permission: 403;
// the API server unreachable or too slow: 503 (never a silent allow);
// every review slot taken: 429 with Retry-After. /healthz and /readyz
// stay open for the kubelet's probes.
//
// What a request can cost is bounded: a token over MaxTokenBytes or not
// shaped like a JWT is refused without a review; at most MaxReviews
// reviews wait on the API server at once (reservedReviews of them only
// for renewals of what was trusted before); concurrent requests with
// one token share one review; each review is bounded by ReviewTimeout;
// decisions are kept in least-recently-used caches with the kubelet's
// TTLs. Auth is a prometheus.Collector of its own counters (register it
// beside the server's, Config.Collectors).
type Auth struct {
	Reviewer Reviewer
	Node     string
	// Audience, when not "", is the one audience a token must be for
	// (the loopback listener's: answerproof.ReaderAudience), and Permit
	// then decides who may in place of a SubjectAccessReview: the API
	// server authorised the request when it minted the token.
	Audience string
	Permit   func(authnv1.UserInfo) error
	Log      *slog.Logger
	Now      func() time.Time
	// MaxReviews is DefaultMaxReviews when 0; at least reservedReviews+1.
	MaxReviews int
	// ReviewTimeout is DefaultReviewTimeout when 0.
	ReviewTimeout time.Duration

	once sync.Once
	// valid holds tokens the API server accepted (even expired: such a
	// token's next review may use the reserved slots), invalid the
	// tokens it refused, authz access decisions. Keys are SHA-256 of the
	// token: the caches keep no token.
	valid, invalid, authz *lru.Cache
	flight                singleflight.Group
	open, reserved        chan struct{}
	waiting               atomic.Int64
	m                     *authMetrics
}

var _ prometheus.Collector = (*Auth)(nil)

func (a *Auth) init() {
	a.once.Do(func() {
		if a.Now == nil {
			a.Now = time.Now
		}
		if a.Log == nil {
			a.Log = slog.Default()
		}
		if a.MaxReviews <= 0 {
			a.MaxReviews = DefaultMaxReviews
		}
		if a.MaxReviews <= reservedReviews {
			a.MaxReviews = reservedReviews + 1
		}
		if a.ReviewTimeout <= 0 {
			a.ReviewTimeout = DefaultReviewTimeout
		}
		a.valid, a.invalid, a.authz = lru.New(maxCached), lru.New(maxCached), lru.New(maxCached)
		a.open = make(chan struct{}, a.MaxReviews-reservedReviews)
		a.reserved = make(chan struct{}, reservedReviews)
		a.m = newAuthMetrics(func() float64 { return float64(len(a.open) + len(a.reserved)) }, func() float64 { return float64(a.waiting.Load()) })
	})
}

// Describe implements prometheus.Collector.
func (a *Auth) Describe(ch chan<- *prometheus.Desc) {
	a.init()
	a.m.each(func(c prometheus.Collector) { c.Describe(ch) })
}

// Collect implements prometheus.Collector.
func (a *Auth) Collect(ch chan<- prometheus.Metric) {
	a.init()
	a.m.each(func(c prometheus.Collector) { c.Collect(ch) })
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
	a.init()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sub := subresource(r.URL.Path)
		if sub == "" {
			h.ServeHTTP(w, r)
			return
		}
		if a.check(w, r, sub) {
			a.m.requests.WithLabelValues("allowed").Inc()
			h.ServeHTTP(w, r)
		}
	})
}

// check answers the request and returns false unless it may go on.
func (a *Auth) check(w http.ResponseWriter, r *http.Request, sub string) bool {
	token, ok := bearer(r)
	if !ok {
		a.refuse(w, "no_token", http.StatusUnauthorized, "Unauthorized")
		return false
	}
	if err := CheckTokenShape(token); err != nil {
		a.refuse(w, "malformed", http.StatusUnauthorized, "Unauthorized: "+err.Error())
		return false
	}
	user, ok, err := a.authenticate(r.Context(), token)
	if err != nil {
		a.unavailable(w, "token review", err)
		return false
	}
	if !ok {
		a.refuse(w, "unauthenticated", http.StatusUnauthorized, "Unauthorized")
		return false
	}
	if a.Permit != nil {
		if err := a.Permit(user); err != nil {
			a.refuse(w, "forbidden", http.StatusForbidden, "Forbidden: "+err.Error())
			return false
		}
		return true
	}
	allowed, reason, err := a.authorize(r.Context(), user, sub)
	if err != nil {
		a.unavailable(w, "subject access review", err)
		return false
	}
	if !allowed {
		msg := "Forbidden (user=" + user.Username + ", verb=get, resource=nodes, subresource=" + sub + ")"
		if reason != "" {
			msg += ": " + reason
		}
		a.refuse(w, "forbidden", http.StatusForbidden, msg)
		return false
	}
	return true
}

func (a *Auth) refuse(w http.ResponseWriter, why string, code int, msg string) {
	a.m.requests.WithLabelValues(why).Inc()
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="cgwarden"`)
	}
	http.Error(w, msg, code)
}

// unavailable answers a review that could not be made: 429 when every
// slot was taken, else 503 (the API server unreachable or too slow).
func (a *Auth) unavailable(w http.ResponseWriter, what string, err error) {
	if errors.Is(err, errBusy) {
		w.Header().Set("Retry-After", retryAfter)
		a.refuse(w, "throttled", http.StatusTooManyRequests, what+": "+err.Error()+"; retry later")
		return
	}
	a.Log.Warn(what+" failed", "err", err)
	a.refuse(w, "unavailable", http.StatusServiceUnavailable, what+" unavailable")
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

// CheckTokenShape refuses, without asking anyone, a bearer token the API
// server could not accept as a ServiceAccount or OIDC token: over
// MaxTokenBytes, or not a JWT (RFC 7519: three dot-separated
// base64url segments, unpadded, none empty). Bootstrap tokens and static
// token files' tokens are not JWTs: the agent does not take them.
func CheckTokenShape(token string) error {
	if len(token) > MaxTokenBytes {
		return fmt.Errorf("bearer token over %d bytes", MaxTokenBytes)
	}
	segments := 0
	for seg := range strings.SplitSeq(token, ".") {
		segments++
		if seg == "" || segments > 3 {
			return errors.New("bearer token is not a JWT (want three base64url segments)")
		}
		for i := 0; i < len(seg); i++ {
			if c := seg[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return errors.New("bearer token is not a JWT (a character outside base64url)")
			}
		}
	}
	if segments != 3 {
		return errors.New("bearer token is not a JWT (want three base64url segments)")
	}
	return nil
}

// acquire takes a review slot: an open one, or for a trusted review a
// reserved one when none is open. ok is false when none is free.
func (a *Auth) acquire(trusted bool) (release func(), ok bool) {
	select {
	case a.open <- struct{}{}:
		return func() { <-a.open }, true
	default:
	}
	if trusted {
		select {
		case a.reserved <- struct{}{}:
			return func() { <-a.reserved }, true
		default:
		}
	}
	return nil, false
}

// review runs one review for key, shared by every request that asks for
// the same key while it runs (cached, asked first, gives a decision
// stored meanwhile), in a slot of its own and under
// ReviewTimeout. The review does not end when the request that started it
// goes away (the others still wait for it); a request that goes away
// stops waiting.
func review[T any](ctx context.Context, a *Auth, kind, key string, trusted bool, cached func() (T, bool), do func(context.Context) (T, error)) (T, error) {
	var ran atomic.Bool
	ch := a.flight.DoChan(key, func() (any, error) {
		ran.Store(true)
		// A request that missed the cache just before the review before
		// it stored its decision finds that decision here.
		if v, ok := cached(); ok {
			return v, nil
		}
		release, ok := a.acquire(trusted)
		if !ok {
			return nil, errBusy
		}
		defer release()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.ReviewTimeout)
		defer cancel()
		v, err := do(rctx)
		switch {
		case err != nil && rctx.Err() != nil:
			a.m.reviews.WithLabelValues(kind, "timeout").Inc()
			err = fmt.Errorf("no answer within %s: %w", a.ReviewTimeout, err)
		case err != nil:
			a.m.reviews.WithLabelValues(kind, "error").Inc()
		}
		return v, err
	})
	// Counted once it has joined its review (or started one): a request
	// counted as waiting shares the review in flight for its key. Counted
	// before DoChan, requests held up between the two (a loaded host
	// lane) joined no review, and TestAuthMergesDuplicateReviews, which
	// lets the review end once all ten wait, saw none merged.
	a.waiting.Add(1)
	defer a.waiting.Add(-1)
	select {
	case r := <-ch:
		if !ran.Load() {
			a.m.merged.WithLabelValues(kind).Inc()
		}
		v, _ := r.Val.(T)
		return v, r.Err
	case <-ctx.Done():
		var none T
		return none, ctx.Err()
	}
}

func (a *Auth) authenticate(ctx context.Context, token string) (authnv1.UserInfo, bool, error) {
	sum := sha256.Sum256([]byte(a.Audience + "\x00" + token))
	key := string(sum[:])
	// known: the API server accepted this token before (its decision has
	// expired): its review may use the reserved slots.
	lookup := func() (v authnResult, ok, known bool) {
		now := a.Now()
		if v, ok := a.valid.Get(key); ok {
			if d := v.(authnDecision); now.Before(d.until) {
				return authnResult{user: d.user, ok: true}, true, true
			}
			return authnResult{}, false, true
		}
		if v, ok := a.invalid.Get(key); ok && now.Before(v.(time.Time)) {
			return authnResult{}, true, false
		}
		return authnResult{}, false, false
	}
	cached := func() (authnResult, bool) { v, ok, _ := lookup(); return v, ok }
	r, ok, known := lookup()
	if ok {
		a.m.hits.WithLabelValues("token").Inc()
		return r.user, r.ok, nil
	}
	r, err := review(ctx, a, "token", "n"+key, known, cached, func(ctx context.Context) (authnResult, error) {
		user, ok, err := a.Reviewer.Authenticate(ctx, token, a.Audience)
		if err != nil {
			return authnResult{}, err
		}
		if ok {
			a.m.reviews.WithLabelValues("token", "accepted").Inc()
			a.invalid.Remove(key)
			a.valid.Add(key, authnDecision{user: user, until: a.Now().Add(authnTTL)})
		} else {
			a.m.reviews.WithLabelValues("token", "refused").Inc()
			a.valid.Remove(key)
			a.invalid.Add(key, a.Now().Add(authnTTL))
		}
		return authnResult{user: user, ok: ok}, nil
	})
	return r.user, r.ok, err
}

type authnResult struct {
	user authnv1.UserInfo
	ok   bool
}

func (a *Auth) authorize(ctx context.Context, u authnv1.UserInfo, sub string) (bool, string, error) {
	key := u.Username + "\x00" + u.UID + "\x00" + strings.Join(u.Groups, "\x00") + "\x00" + sub
	cached := func() (authzDecision, bool) {
		if v, ok := a.authz.Get(key); ok {
			if d := v.(authzDecision); a.Now().Before(d.until) {
				return d, true
			}
		}
		return authzDecision{}, false
	}
	if d, ok := cached(); ok {
		a.m.hits.WithLabelValues("access").Inc()
		return d.ok, d.reason, nil
	}
	// An access review is made only for an authenticated user: it may
	// use the reserved slots.
	d, err := review(ctx, a, "access", "z"+key, true, cached, func(ctx context.Context) (authzDecision, error) {
		ok, reason, err := a.Reviewer.Authorize(ctx, u, a.Node, sub)
		if err != nil {
			return authzDecision{}, err
		}
		ttl, result := deniedTTL, "denied"
		if ok {
			ttl, result = allowedTTL, "allowed"
		}
		a.m.reviews.WithLabelValues("access", result).Inc()
		d := authzDecision{ok: ok, reason: reason, until: a.Now().Add(ttl)}
		a.authz.Add(key, d)
		return d, nil
	})
	return d.ok, d.reason, err
}

// authMetrics are Auth's counters on the agent's /metrics.
type authMetrics struct {
	requests *prometheus.CounterVec
	reviews  *prometheus.CounterVec
	hits     *prometheus.CounterVec
	merged   *prometheus.CounterVec
	inFlight prometheus.GaugeFunc
	waiting  prometheus.GaugeFunc
}

func newAuthMetrics(inFlight, waiting func() float64) *authMetrics {
	m := &authMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgwarden_auth_requests_total",
			Help: "Requests to an authenticated endpoint, by outcome: allowed, or refused as no_token, malformed (over 8 KiB or not a JWT; no review made), unauthenticated (401), forbidden (403), throttled (429: every review slot taken), unavailable (503: the API server failed or did not answer in time)."},
			[]string{"result"}),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgwarden_auth_reviews_total",
			Help: "Reviews sent to the API server, by review (token: TokenReview, access: SubjectAccessReview) and result (accepted, refused, allowed, denied, error, timeout)."},
			[]string{"review", "result"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgwarden_auth_cache_hits_total",
			Help: "Decisions answered from the cache, with no review, by review (token, access)."},
			[]string{"review"}),
		merged: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cgwarden_auth_reviews_merged_total",
			Help: "Requests that waited for a review another request with the same token (or user) had already started, instead of making their own, by review (token, access)."},
			[]string{"review"}),
		inFlight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cgwarden_auth_reviews_in_flight",
			Help: "Reviews waiting on the API server now (at most the agent's cap)."}, inFlight),
		waiting: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cgwarden_auth_requests_waiting",
			Help: "Requests waiting for a review now, their own or one they share with other requests for the same token."}, waiting),
	}
	for _, r := range []string{"allowed", "no_token", "malformed", "unauthenticated", "forbidden", "throttled", "unavailable"} {
		m.requests.WithLabelValues(r)
	}
	for _, k := range []string{"token", "access"} {
		m.hits.WithLabelValues(k)
		m.merged.WithLabelValues(k)
	}
	return m
}

// each calls f with each of m's series.
func (m *authMetrics) each(f func(prometheus.Collector)) {
	for _, c := range []prometheus.Collector{m.requests, m.reviews, m.hits, m.merged, m.inFlight, m.waiting} {
		f(c)
	}
}
