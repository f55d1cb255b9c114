package metadata

// NodeInfo is what the node's Node object says of the node itself, beside
// what its cgroups show: for the audit's node header. A field is "" when
// unknown (no API server, the Node not readable or not yet read, a pods
// file), never a guess.
//
// NodeInfo is comparable: a source rebuilds its Set when it changes.
type NodeInfo struct {
	// ContainerRuntimeVersion is the Node's
	// status.nodeInfo.containerRuntimeVersion as the kubelet reports it
	// (e.g. containerd://2.4.2, cri-o://1.33.1).
	ContainerRuntimeVersion string
}

// SetNodeInfo sets what the Node object says (NewSet's default: nothing
// known).
func (s *Set) SetNodeInfo(n NodeInfo) {
	if s != nil {
		s.node = n
	}
}

// NodeInfo is what the Node object says; the zero NodeInfo when unknown
// (and for a nil Set).
func (s *Set) NodeInfo() NodeInfo {
	if s == nil {
		return NodeInfo{}
	}
	return s.node
}
