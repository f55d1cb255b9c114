// Image tools of the cluster test lane (scripts/cluster): mkimage packs a
// directory into an OCI archive for `ctr images import`; pause is the pod
// sandbox program. Its own module, apart from cgwarden's dependencies.
module github.com/cgwarden/cgwarden/test/cluster/images

go 1.26.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
