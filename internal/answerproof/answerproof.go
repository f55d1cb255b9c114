package answerproof

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
)

const (
	// ReaderAudience is the audience of the tokens that open an agent's
	// loopback listener: no other party accepts them, the API server
	// included.
	ReaderAudience = "cgwarden.io/agent-reader"
	// DefaultReader is the ServiceAccount, in the agent's namespace,
	// whose tokens open the loopback listener.
	DefaultReader = "cgwarden-reader"
	// ChallengeHeader carries the plugin's challenge; AnswerHeader the
	// agent's answer token.
	ChallengeHeader = "Cgwarden-Challenge"
	AnswerHeader    = "Cgwarden-Answer-Token"
	// TokenSeconds is how long the tokens of the handshake live: the
	// least TokenRequest allows.
	TokenSeconds = 600
	// challengeBytes is the challenge's entropy.
	challengeBytes = 32
	// answerAudiencePrefix starts every answer's audience.
	answerAudiencePrefix = "cgwarden.io/agent-answer/"
)

// Extra keys the API server puts in a bound ServiceAccount token's user
// (TokenReview's status.user.extra): the pod's, or the node's.
const (
	extraPodName  = "authentication.kubernetes.io/pod-name"
	extraPodUID   = "authentication.kubernetes.io/pod-uid"
	extraNodeName = "authentication.kubernetes.io/node-name"
)

// NewChallenge is a fresh challenge: 32 random bytes, base64url.
func NewChallenge() (string, error) {
	b := make([]byte, challengeBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// CheckChallenge refuses a challenge not shaped like NewChallenge's (an
// agent mints a token only for one).
func CheckChallenge(c string) error {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) != challengeBytes {
		return fmt.Errorf("%s: want %d bytes in unpadded base64url", ChallengeHeader, challengeBytes)
	}
	return nil
}

// AnswerAudience is the audience of the answer token for challenge, the
// request's path (with its query) and the answer's body.
func AnswerAudience(challenge, path string, body []byte) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(challenge), []byte(path)} {
		h.Write(part)
		h.Write([]byte{0})
	}
	h.Write(body)
	return answerAudiencePrefix + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// ServiceAccountUser is the username of ServiceAccount ns/name.
func ServiceAccountUser(ns, name string) string {
	return "system:serviceaccount:" + ns + ":" + name
}

// Pod is a pod as a token can be bound to it.
type Pod struct {
	Namespace, Name, UID string
	// ServiceAccount is the pod's (spec.serviceAccountName).
	ServiceAccount string
}

func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// CheckBound says why a token is not ServiceAccount user's, for audience,
// bound to pod p (nil when it is), from its TokenReview's status.
func CheckBound(st authnv1.TokenReviewStatus, audience, user string, p Pod) error {
	if !st.Authenticated {
		msg := "the API server does not accept it"
		if st.Error != "" {
			msg += ": " + st.Error
		}
		return errors.New(msg)
	}
	if !slices.Contains(st.Audiences, audience) {
		return fmt.Errorf("not for audience %s (it is for %s)", audience, strings.Join(st.Audiences, ", "))
	}
	return CheckUser(st.User, user, p)
}

// CheckUser says why an authenticated token's user u is not ServiceAccount
// user's bound to pod p (nil when it is).
func CheckUser(u authnv1.UserInfo, user string, p Pod) error {
	if u.Username != user {
		return fmt.Errorf("the token is %s's, not %s's", u.Username, user)
	}
	name, uid := u.Extra[extraPodName], u.Extra[extraPodUID]
	if len(name) != 1 || len(uid) != 1 {
		return errors.New("the token is bound to no pod")
	}
	if name[0] != p.Name || uid[0] != p.UID {
		return fmt.Errorf("the token is bound to pod %s (uid %s), not %s (uid %s)", name[0], uid[0], p.Name, p.UID)
	}
	return nil
}

// CheckReader says why an authenticated token's user u is not
// ServiceAccount reader's bound to node (nil when it is). The reader's
// tokens are bound to the agent's Node, not its pod: the API server binds
// a token to a pod only for the pod's own ServiceAccount.
func CheckReader(u authnv1.UserInfo, reader, node string) error {
	if u.Username != reader {
		return fmt.Errorf("the token is %s's, not %s's", u.Username, reader)
	}
	if n := u.Extra[extraNodeName]; len(n) != 1 || n[0] != node {
		if len(n) == 0 {
			return fmt.Errorf("the token is bound to no node (want node %s)", node)
		}
		return fmt.Errorf("the token is bound to node %s, not %s", strings.Join(n, ","), node)
	}
	return nil
}
