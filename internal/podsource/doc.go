// Package podsource finds the names behind a node's pod UIDs and
// container IDs for the long-running agent: pod name and namespace,
// container names and start times, from the first source that works.
//
//   - CRI: the node's container runtime over its unix socket
//     (k8s.io/cri-api v1 RuntimeService: ListPodSandbox, ListContainers);
//     containerd, k3s's containerd and CRI-O default sockets are tried.
//     Needs no credentials and no API server, only the socket.
//   - Kubernetes: an informer on the API server limited to this node's
//     pods (field selector spec.nodeName), in-cluster config or a
//     kubeconfig; it keeps slim pods (SlimPod) and returns the same slice
//     until one changes.
//   - File: the output of `kubectl get pods -A -o json`, read once.
//
// VMWatches reads, for the agent's live VM sizes, the NeonVM
// VirtualMachines and KubeVirt VMIs this node's pods reference, one watch
// per VM (the kubelet's way with its pods' Secrets), counted by the pods
// and stopped with the last.
//
// Every source is a metadata.Lister (one method). A source that fails keeps
// failing softly: the agent logs it and serves pods by UID. Open never
// makes the agent stop serving.
package podsource
