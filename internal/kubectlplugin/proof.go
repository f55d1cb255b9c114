package kubectlplugin

import (
	"context"
	"errors"
	"fmt"

	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"

	"github.com/cgwarden/cgwarden/internal/answerproof"
)

// Prover is the plugin's side of answerproof: the token that opens an
// agent's loopback listener, and the check that an answer came from the
// agent's pod.
type Prover interface {
	// ReaderToken is a token the API server mints, as the user, that
	// only a's agent accepts.
	ReaderToken(ctx context.Context, a Agent) (string, error)
	// Verify says why token does not prove that a's pod sent body in
	// answer to challenge on path (nil when it does).
	Verify(ctx context.Context, a Agent, challenge, path string, body []byte, token string) error
}

// apiProver is the Prover of the plugin: both through the API server,
// with the user's credentials.
type apiProver struct {
	core   corev1client.ServiceAccountsGetter
	authn  authnclient.TokenReviewsGetter
	reader string
}

var _ Prover = apiProver{}

// ReaderToken implements Prover: a TokenRequest for the reader
// ServiceAccount in the agent's namespace, for answerproof.ReaderAudience,
// bound to the agent's Node (it dies with the Node object; the agent on
// another node refuses it), for the least time TokenRequest allows.
func (p apiProver) ReaderToken(ctx context.Context, a Agent) (string, error) {
	tr, err := p.core.ServiceAccounts(a.Namespace).CreateToken(ctx, p.reader, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences:         []string{answerproof.ReaderAudience},
		ExpirationSeconds: ptr.To[int64](answerproof.TokenSeconds),
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: a.Node},
	}}, metav1.CreateOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return "", fmt.Errorf("a token of ServiceAccount %s/%s for node %s's agent: %w\n%s", a.Namespace, p.reader, a.Node, err, readerHint(a.Namespace, p.reader))
	case apierrors.IsNotFound(err):
		return "", fmt.Errorf("a token of ServiceAccount %s/%s for node %s's agent: %w (is the agent installed from this version's manifests? --agent-reader names another)", a.Namespace, p.reader, a.Node, err)
	case err != nil:
		return "", fmt.Errorf("a token of ServiceAccount %s/%s for node %s's agent: %w", a.Namespace, p.reader, a.Node, err)
	}
	return tr.Status.Token, nil
}

// Verify implements Prover: a TokenReview of the answer token for the
// answer's own audience, which must be the agent pod's ServiceAccount's,
// bound to that pod.
func (p apiProver) Verify(ctx context.Context, a Agent, challenge, path string, body []byte, token string) error {
	if token == "" {
		return errors.New("it carries no answer token (" + answerproof.AnswerHeader + ")")
	}
	aud := answerproof.AnswerAudience(challenge, path, body)
	r, err := p.authn.TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{aud}}}, metav1.CreateOptions{})
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("checking its answer token: %w\nkubectl cgwarden needs create on tokenreviews (authentication.k8s.io) to check that an answer came from the agent (docs/kubectl-plugin.md)", err)
	}
	if err != nil {
		return fmt.Errorf("checking its answer token: %w", err)
	}
	pod := answerproof.Pod{Namespace: a.Namespace, Name: a.Pod, UID: a.UID, ServiceAccount: a.ServiceAccount}
	return answerproof.CheckBound(r.Status, aud, answerproof.ServiceAccountUser(a.Namespace, a.ServiceAccount), pod)
}

// readerHint says what a user needs for the reader's token.
func readerHint(ns, reader string) string {
	return fmt.Sprintf("kubectl cgwarden needs create on serviceaccounts/token of ServiceAccount %s in namespace %s: its token, for the agent alone, is what the agent takes (your own credentials never leave the API server; docs/kubectl-plugin.md)", reader, ns)
}
