package podsource

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The "info" of verbose statuses, cut to the fields around "pid" (the
// rest is the container's config and OCI spec): containerd 2.x's
// containerInfo (internal/cri/server/container_status.go) and CRI-O's
// (server/container_status.go, createContainerInfo).
const (
	containerdInfo = `{"sandboxID":"0d5d0e9e7a4c2f3b3f5e2d6c0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b","pid":41873,"removing":false,"snapshotKey":"c339025b","snapshotter":"overlayfs","runtimeType":"io.containerd.runc.v2","runtimeSpec":{"ociVersion":"1.2.0","process":{"user":{"uid":0,"gid":0}},"linux":{"cgroupsPath":"kubepods-besteffort-pod99afd520_5b3e_4c8d_8471_4b6c8ee26b4c.slice:cri-containerd:c339025b"}}}`
	crioInfo       = `{"sandboxID":"5e2a","pid":2211,"runtimeSpec":{"ociVersion":"1.0.2-dev"},"privileged":false}`
)

func TestParseStatusPID(t *testing.T) {
	for _, c := range []struct {
		name string
		info map[string]string
		want int
		err  string
	}{
		{"containerd", map[string]string{"info": containerdInfo}, 41873, ""},
		{"CRI-O", map[string]string{"info": crioInfo}, 2211, ""},
		{"not verbose", nil, 0, `no "pid"`},
		{"no pid", map[string]string{"info": `{"sandboxID":"x"}`}, 0, `no "pid"`},
		{"pid 0 (exited)", map[string]string{"info": `{"pid":0}`}, 0, "gives pid 0"},
		{"negative", map[string]string{"info": `{"pid":-4}`}, 0, "gives pid -4"},
		{"beyond PID_MAX_LIMIT", map[string]string{"info": `{"pid":4194305}`}, 0, "gives pid"},
		{"not a number", map[string]string{"info": `{"pid":"12"}`}, 0, "info"},
		{"not JSON", map[string]string{"info": `pid=12`}, 0, "info"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseStatusPID(c.info)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("ParseStatusPID = %d, %v; want an error saying %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("ParseStatusPID = %d, %v; want %d", got, err, c.want)
			}
		})
	}
}

// statusRuntime answers the verbose status calls as containerd does.
type statusRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu      sync.Mutex
	state   runtimeapi.ContainerState
	asked   []*runtimeapi.ContainerStatusRequest
	sandbox []*runtimeapi.PodSandboxStatusRequest
}

func (s *statusRuntime) ContainerStatus(_ context.Context, r *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, r)
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: r.ContainerId, State: s.state},
		Info: map[string]string{"info": containerdInfo}}, nil
}

func (s *statusRuntime) PodSandboxStatus(_ context.Context, r *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sandbox = append(s.sandbox, r)
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: r.PodSandboxId, State: runtimeapi.PodSandboxState_SANDBOX_READY},
		Info: map[string]string{"info": `{"pid":41001}`}}, nil
}

// TestContainerPIDOverTheProtocol: the PID comes from a verbose status
// over the real gRPC protocol; a container that is not running has none.
func TestContainerPIDOverTheProtocol(t *testing.T) {
	rt := &statusRuntime{state: runtimeapi.ContainerState_CONTAINER_RUNNING}
	c := dialCRI(startStatusRuntime(t, rt), false)
	defer c.Close()
	pid, err := c.ContainerPID(context.Background(), spinCtr, false)
	if err != nil || pid != 41873 {
		t.Fatalf("ContainerPID = %d, %v; want 41873", pid, err)
	}
	sbPID, sbErr := c.ContainerPID(context.Background(), "sb-new", true)
	rt.mu.Lock()
	if len(rt.asked) != 1 || !rt.asked[0].Verbose || rt.asked[0].ContainerId != spinCtr {
		t.Errorf("asked %v, want one verbose ContainerStatus of %s", rt.asked, spinCtr)
	}
	if sbErr != nil || sbPID != 41001 || len(rt.sandbox) != 1 || !rt.sandbox[0].Verbose {
		t.Errorf("sandbox: ContainerPID = %d, %v (asked %v); want 41001 from a verbose PodSandboxStatus", sbPID, sbErr, rt.sandbox)
	}
	rt.state = runtimeapi.ContainerState_CONTAINER_EXITED
	rt.mu.Unlock()
	if pid, err := c.ContainerPID(context.Background(), spinCtr, false); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("exited container: ContainerPID = %d, %v; want an error saying it is not running", pid, err)
	}
}

func startStatusRuntime(t *testing.T, rt runtimeapi.RuntimeServiceServer) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, rt)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return sock
}
