// Package sizetrust decides, for the live agent, which declared pod sizes
// it may believe (metadata.Trust): the cgwarden.io/cpu annotation only in
// the namespaces --trust-size-annotations names, or everywhere when the
// size policy — a ValidatingAdmissionPolicy and its binding, both named
// PolicyName (deploy/kustomize/size-policy) — is installed; and every size
// capped at the node's allocatable CPU and at its namespace's bound
// (--max-size, which the Checker passes on as it is given).
//
// A Checker watches the policy, its binding and the node's own Node
// object, each alone (an informer on a list and watch with the field
// selector metadata.name=<name>, no resync): an idle node asks the API
// server nothing beyond those three watches, and a change reaches the
// verdict as the watch delivers it; a scan reads the last verdict. A
// watch the API server refuses (no RBAC for it, or no such API) is asked
// again after 10 minutes, doubling up to an hour, not at the informer's
// pace of every 30 s.
//
// The Node watch also gives the audit's node header what the Node says of
// the node itself (Checker.NodeInfo: the container runtime), so that the
// agent asks the API server nothing more for it.
package sizetrust
