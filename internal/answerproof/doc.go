// Package answerproof is the handshake between kubectl cgwarden and an
// agent's loopback listener (serve --local-listen), designed so that the
// node never sees the user's credential and the user can tell the agent's
// answer from a squatter's.
//
// The request: the plugin asks the API server, as the user, for a token
// of the reader ServiceAccount (DefaultReader, in the agent's namespace)
// with the audience ReaderAudience, bound to the Node of the agent it is
// about to reach (TokenRequest's boundObjectRef; a token is bound to a
// pod only for the pod's own ServiceAccount). Who may read a node's audit is decided by the API server then:
// RBAC create on serviceaccounts/token for that ServiceAccount. The agent
// accepts such a token only if a TokenReview with ReaderAudience accepts
// it, it is the reader's, and it is bound to the agent's own node. No
// token the API server itself accepts is ever sent, so whatever listens
// on the node's port receives nothing it can use elsewhere.
//
// The answer: the plugin sends a fresh random challenge (Challenge
// header). The agent answers with a token of its own ServiceAccount,
// bound to its pod, whose only audience is AnswerAudience(challenge,
// path, body): a digest of the challenge, the path and the exact body.
// The plugin checks it with a TokenReview for that audience: only a
// process that can have the API server mint tokens as the agent pod's
// ServiceAccount, bound to that pod, can produce one, and only for this
// answer.
package answerproof
