package podsource

import (
	"context"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// fakeRuntime is a CRI RuntimeService speaking the real protocol over a
// unix socket; only the two list calls are implemented, as in a runtime
// that cgwarden only reads.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu         sync.Mutex
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	fail       error
}

func (f *fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	return &runtimeapi.ListPodSandboxResponse{Items: f.sandboxes}, nil
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &runtimeapi.ListContainersResponse{Containers: f.containers}, nil
}

func startRuntime(t *testing.T, rt *fakeRuntime) string {
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

const (
	spinUID = "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c"
	spinCtr = "c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00"
)

func seedRuntime() *fakeRuntime {
	t0 := time.Date(2024, 8, 21, 17, 22, 33, 0, time.UTC).UnixNano()
	return &fakeRuntime{
		sandboxes: []*runtimeapi.PodSandbox{
			{Id: "sb-old", CreatedAt: t0 - 1e9, Metadata: &runtimeapi.PodSandboxMetadata{Name: "spin-test-66d9dd45f5-csf5j", Namespace: "default", Uid: spinUID}},
			{Id: "sb-new", CreatedAt: t0, RuntimeHandler: "wasmtime-spin-v2", Labels: map[string]string{"app": "spin-test"}, Metadata: &runtimeapi.PodSandboxMetadata{Name: "spin-test-66d9dd45f5-csf5j", Namespace: "default", Uid: spinUID, Attempt: 1}},
			{Id: "sb-other", CreatedAt: t0, Metadata: &runtimeapi.PodSandboxMetadata{Name: "coredns-1", Namespace: "kube-system", Uid: "79c5176e-2321-b374-1f55-aee0036af2a9"}},
		},
		containers: []*runtimeapi.Container{
			{Id: spinCtr, PodSandboxId: "sb-new", CreatedAt: t0 + 5e8, Metadata: &runtimeapi.ContainerMetadata{Name: "spin-test"}},
			{Id: "orphan", PodSandboxId: "sb-gone", Metadata: &runtimeapi.ContainerMetadata{Name: "x"}},
			{Id: "dns", PodSandboxId: "sb-other", Metadata: &runtimeapi.ContainerMetadata{Name: "coredns"}},
		},
	}
}

func TestCRIListsPodsAndContainers(t *testing.T) {
	sock := startRuntime(t, seedRuntime())
	c := dialCRI(sock, true) // every label: the CLI's source
	defer c.Close()
	pods, err := c.Pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 2 {
		t.Fatalf("%d pods, want 2 (two sandboxes of one pod are one pod): %+v", len(pods), pods)
	}
	p := pods[0]
	if p.UID != spinUID || p.Name != "spin-test-66d9dd45f5-csf5j" || p.Namespace != "default" {
		t.Errorf("pod = %+v", p)
	}
	if p.RuntimeHandler != "wasmtime-spin-v2" {
		t.Errorf("runtime handler %q, want the newest sandbox's wasmtime-spin-v2", p.RuntimeHandler)
	}
	if p.SandboxID != "sb-new" || !p.StartTime.Equal(time.Date(2024, 8, 21, 17, 22, 33, 0, time.UTC)) || p.Labels["app"] != "spin-test" {
		t.Errorf("newest sandbox not used: %s %s %v", p.SandboxID, p.StartTime, p.Labels)
	}
	if !slices.Equal(p.PastSandboxIDs, []string{"sb-old"}) {
		t.Errorf("past sandboxes %q, want the older sb-old (its cgroup may still be there)", p.PastSandboxIDs)
	}
	if len(p.Containers) != 1 || p.Containers[0].Name != "spin-test" || p.Containers[0].ID != spinCtr ||
		!p.Containers[0].StartTime.Equal(time.Date(2024, 8, 21, 17, 22, 33, 5e8, time.UTC)) {
		t.Errorf("containers = %+v", p.Containers)
	}
	if pods[1].Containers[0].Name != "coredns" {
		t.Errorf("second pod = %+v", pods[1])
	}
}

// TestCRIKeepsWhatTheAgentReads: the agent's CRI source keeps of a
// sandbox's labels the VM labels and of its annotations the cgwarden.io/
// ones, however many a tenant wrote on its pod; the CLI's (all labels)
// keeps every label.
func TestCRIKeepsWhatTheAgentReads(t *testing.T) {
	rt := seedRuntime()
	sb := rt.sandboxes[1]
	sb.Labels = map[string]string{vmsize.LabelNeonVM: "db", "app": "spin-test"}
	sb.Annotations = map[string]string{vmsize.AnnotationCPU: "2", "kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 64<<10)}
	for i := range 1000 {
		sb.Labels[fmt.Sprintf("tenant.example/l%d", i)] = "v"
	}
	sock := startRuntime(t, rt)
	for _, all := range []bool{false, true} {
		c := dialCRI(sock, all)
		pods, err := c.Pods(t.Context())
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(pods, func(p metadata.Pod) bool { return p.UID == spinUID })
		if i < 0 {
			t.Fatalf("all labels %v: no pod %s in %+v", all, spinUID, pods)
		}
		p := pods[i]
		want := map[string]string{vmsize.LabelNeonVM: "db"}
		if all {
			want = sb.Labels
		}
		if !maps.Equal(p.Labels, want) {
			t.Errorf("all labels %v: %d labels kept, want %d", all, len(p.Labels), len(want))
		}
		if !maps.Equal(p.Annotation, map[string]string{vmsize.AnnotationCPU: "2"}) {
			t.Errorf("all labels %v: annotations %d kept, want cgwarden.io/cpu alone", all, len(p.Annotation))
		}
	}
}

// TestCRIListingUnchangedIsTheSameSlice: a listing with the same pods as
// the last one (in the runtime's order of the moment: it lists from a
// map) returns the very slice of the last call, so the metadata built on
// it is kept (hold.MetaSource compares the slice) and the weight holder
// compares no sizes at a scan where nothing changed; any change gives a
// new slice.
func TestCRIListingUnchangedIsTheSameSlice(t *testing.T) {
	rt := seedRuntime()
	c := dialCRI(startRuntime(t, rt), false)
	defer c.Close()
	list := func() []metadata.Pod {
		t.Helper()
		pods, err := c.Pods(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return pods
	}
	first := list()
	rt.mu.Lock()
	slices.Reverse(rt.sandboxes)
	slices.Reverse(rt.containers)
	rt.mu.Unlock()
	if again := list(); &again[0] != &first[0] {
		t.Fatalf("an unchanged listing (in another order) gave a new slice %+v, want the last one %+v", again, first)
	}
	rt.mu.Lock()
	rt.sandboxes[0].Annotations = map[string]string{vmsize.AnnotationCPU: "4"}
	rt.mu.Unlock()
	changed := list()
	if &changed[0] == &first[0] {
		t.Fatal("a changed annotation gave the last listing's slice")
	}
	var found bool
	for _, p := range changed {
		found = found || p.Annotation[vmsize.AnnotationCPU] == "4"
	}
	if !found {
		t.Fatalf("the new annotation is not in the listing: %+v", changed)
	}
	rt.mu.Lock()
	rt.containers = append(rt.containers, &runtimeapi.Container{Id: "dns2", PodSandboxId: "sb-other", Metadata: &runtimeapi.ContainerMetadata{Name: "sidecar"}})
	rt.mu.Unlock()
	if more := list(); &more[0] == &changed[0] {
		t.Fatal("a new container gave the last listing's slice")
	}
}

func TestCRIErrorsAreReported(t *testing.T) {
	rt := seedRuntime()
	rt.fail = status.Error(codes.Unavailable, "runtime is restarting")
	c := dialCRI(startRuntime(t, rt), false)
	defer c.Close()
	if _, err := c.Pods(context.Background()); err == nil || !strings.Contains(err.Error(), "runtime is restarting") {
		t.Fatalf("err = %v", err)
	}
	// No runtime at all on the socket path.
	c2 := dialCRI(filepath.Join(t.TempDir(), "absent.sock"), false)
	defer c2.Close()
	if _, err := c2.Pods(context.Background()); err == nil {
		t.Fatal("no error for an absent runtime")
	}
}

func TestOpenAutoPrefersAnsweringCRI(t *testing.T) {
	sock := startRuntime(t, seedRuntime())
	l, name, err := Open(context.Background(), Config{Mode: Auto, CRISocket: sock}, nil)
	if err != nil || name != CRI || l == nil {
		t.Fatalf("auto = %v %q %v", l, name, err)
	}
	// A socket nobody answers on, no API server, no file: none.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	l, name, err = Open(context.Background(), Config{Mode: Auto, CRISocket: filepath.Join(t.TempDir(), "x.sock")}, nil)
	if err != nil || name != None || l != nil {
		t.Fatalf("auto without sources = %v %q %v", l, name, err)
	}
}

func TestOpenModes(t *testing.T) {
	if _, _, err := Open(context.Background(), Config{Mode: "magic"}, nil); err == nil {
		t.Error("bad mode accepted")
	}
	if _, _, err := Open(context.Background(), Config{Mode: File}, nil); err == nil {
		t.Error("file mode without --pods accepted")
	}
	// A forced source that cannot be set up degrades to a failing lister.
	l, name, err := Open(context.Background(), Config{Mode: Kubernetes}, nil)
	if err != nil || name != Kubernetes {
		t.Fatalf("kubernetes without node name: %v %q %v", l, name, err)
	}
	if _, err := l.Pods(context.Background()); err == nil || !strings.Contains(err.Error(), "node") {
		t.Errorf("failing lister err = %v", err)
	}
	l, name, err = Open(context.Background(), Config{Mode: None}, nil)
	if l != nil || name != None || err != nil {
		t.Errorf("none = %v %q %v", l, name, err)
	}
}
