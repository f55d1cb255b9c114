// Package kubectlplugin is `kubectl cgwarden`: the audit and the inventory
// of every node, read from each node's cgwarden agent and shown as one
// cluster-wide table (a NODE column added) or one JSON document.
//
// The agent is reached through the API server's pods/portforward to the
// agent pod of each node, with the user's own credentials: the API server
// authenticates the user and checks RBAC (create on pods/portforward in
// the agent's namespace), then the kubelet's streaming server connects to
// the pod's loopback, where the agent serves /audit and /inspect
// (serve --local-listen) and, with --authenticate, checks the user's
// bearer token, which the plugin sends (token.go). Why not the pod proxy: the API server strips the
// caller's Authorization header (it proxies with no credentials, so an
// agent that checks tokens cannot tell who asks) and refuses pod IPs that
// are not global unicast (a host-network pod on a node whose address is
// loopback); port-forward has neither limit. docs/kubectl-plugin.md says
// what this means for security.
//
// Nodes are asked --parallel at a time, each within --timeout (the
// port-forward's dial, the stream, the request and the answer): FetchAll,
// which takes any Opener, so that tests and simulated agents dial agents
// directly (Direct) where the plugin opens a port-forward (tunnel.go). With
// a namespace, only the nodes that run its pods are asked (one pod LIST).
// With --prometheus the fleet comes from one PromQL query of the agents'
// series instead (prometheus.go); a node's full audit stays the
// port-forward.
//
// The reports are the documents `cgwarden audit -o json` and `cgwarden
// inspect -o json` write; this package only selects pods (by namespace)
// and lays them out, and passes every finding and pod through as the
// agent wrote it. The audit table ends with a line per node read from its
// report's node header (cgroup version, driver, container runtime), each
// part unknown when the agent did not say: older agents are shown, not
// failed.
package kubectlplugin
