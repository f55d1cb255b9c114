// Package sizetrust decides, for the live agent, which declared pod sizes
// it may believe (metadata.Trust): the cgwarden.io/cpu annotation only in
// the namespaces --trust-size-annotations names, or everywhere when the
// size policy — a ValidatingAdmissionPolicy and its binding, both named
// PolicyName (deploy/kustomize/size-policy) — is installed; and every size
// capped at the node's allocatable CPU.
//
// A Checker reads the policy, its binding and the Node object through the
// API server at start and then every few minutes (three GETs per node per
// period: 5,000 nodes every 10 minutes are about 25 requests a second for
// the whole cluster), never per scan; a scan reads the last verdict.
package sizetrust
