package cli

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeCRI is a CRI RuntimeService over a unix socket that lists seed
// 003's runwasi pod (its sandbox and its misplaced container), as k3s's
// containerd would.
type fakeCRI struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (fakeCRI) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{{
		Id: "sb", CreatedAt: 1, Labels: map[string]string{"app": "spin-test-runwasi"},
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "spin-test-runwasi-6b8d9c7f54-m2xq8", Namespace: "default", Uid: "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c"},
	}}}, nil
}

func (fakeCRI) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{{
		Id: "c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00", PodSandboxId: "sb",
		Metadata: &runtimeapi.ContainerMetadata{Name: "spin-test-runwasi"},
	}}}, nil
}

func startFakeCRI(t *testing.T, sock string) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, fakeCRI{})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
}
