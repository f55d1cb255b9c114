//go:build tools

// Package containerd pins the containerd commands the cluster lane builds;
// scripts/cluster builds them with `go build` from this module.
package containerd

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
