// Package modversions holds no code, only a test: that the repository's
// Go modules require one version of each module they share with the
// cluster lane's build (test/cluster/build: Kubernetes, etcd, containerd,
// kwok).
//
// The Go build cache keys a compiled package by its source and by the
// compiled packages it imports, so client-go, the API types, grpc or
// protobuf compiled for cgwarden serve the Kubernetes build too only if
// both name the same versions of every module beneath them. On a cold CI
// machine, with two cores, that sharing is about a fifth of everything
// the lanes compile (docs/testing.md, "One version of each module").
// cgwarden therefore follows the versions Kubernetes v1.37.2 pins, and a
// bump of one of them moves the build's go.mod with it.
package modversions
