// usecshim: the cluster lane's stand-in for seed 003's shim (see main.go).
// Its own module, so that the containerd types it reads are pinned here
// and nothing else of the lane imports them.
module github.com/cgwarden/cgwarden/test/cluster/usecshim

go 1.26.0

require (
	github.com/containerd/cgroups/v3 v3.1.3
	github.com/containerd/containerd/api v1.12.0
	github.com/containerd/ttrpc v1.2.9
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260825221802-da73d73af1c5
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/containerd/log v0.2.0 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/sirupsen/logrus v1.10.2 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/grpc v1.83.2 // indirect
)
