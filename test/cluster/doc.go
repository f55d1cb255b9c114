// Package cluster holds the cluster test lane: smoke tests against a real
// one-node Kubernetes cluster brought up on this machine by scripts/cluster
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
// v1.37.2, containerd 2.4 with runc, metrics-server).
//
// The tests read the cluster from the environment that `scripts/cluster env`
// prints (CGWARDEN_CLUSTER_KUBECONFIG, CGWARDEN_CLUSTER_KUBECTL,
// CGWARDEN_CLUSTER_NODE). Without it they skip, or fail when
// CGWARDEN_REQUIRE_REAL=1. scripts/test runs them as the cluster lane:
//
//	scripts/cluster up
//	eval "$(scripts/cluster env)"
//	cd test/cluster && go test -count=1 -v ./...
//	scripts/cluster down
//
// It is its own Go module (on the k8s.io v0.37.2 libraries that match the
// cluster) so that cgwarden's main module does not take client-go's
// dependencies; the subdirectories build/ (Kubernetes, etcd, containerd
// and kwok, in one module and one go build), metricsserver/, misplace/
// and images/ are further modules that scripts/cluster builds binaries
// from.
package cluster
