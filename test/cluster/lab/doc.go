// Package lab is the cluster lane's machinery written in Go rather than
// in scripts/cluster's bash. It holds the lane's PKI: the cluster CA and
// the front-proxy CA, the certificates of the API server, the kubelet,
// the controllers and the admin (each a Kubernetes user with its groups),
// the service-account signing key, and the kubeconfig of each client,
// made with internal/certs (crypto/x509) and client-go's clientcmd
// instead of openssl and heredocs. cmd/lab is its entry point for
// scripts/cluster and scripts/scale.
package lab
