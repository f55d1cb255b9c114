package podsource

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// criMaxMsg is the kubelet's own limit for CRI responses (16 MiB): a node
// with many pods exceeds gRPC's 4 MiB default.
const criMaxMsg = 16 << 20

// criTimeout bounds one listing; the runtime answers in milliseconds when
// healthy.
const criTimeout = 5 * time.Second

// CRISource lists pods from the container runtime.
type CRISource struct {
	Socket string
	// allLabels keeps every sandbox label (Config.AllLabels).
	allLabels bool
	conn      *grpc.ClientConn
	client    runtimeapi.RuntimeServiceClient
	err       error

	mu   sync.Mutex
	last []metadata.Pod // the slice Pods returned last
}

var _ metadata.Lister = (*CRISource)(nil)

// dialCRI prepares a client for socket; gRPC connects lazily, so an absent
// runtime shows up as an error from Pods, not here.
func dialCRI(socket string, allLabels bool) *CRISource {
	c := &CRISource{Socket: socket, allLabels: allLabels}
	c.conn, c.err = grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(criMaxMsg)))
	if c.err == nil {
		c.client = runtimeapi.NewRuntimeServiceClient(c.conn)
	}
	return c
}

// Close closes the connection.
func (c *CRISource) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Pods lists every sandbox and container the runtime knows. A pod with
// several sandboxes (recreated after a failure) is one pod: the newest
// sandbox gives its start time and sandbox ID; containers of all its
// sandboxes are kept, since an old one's cgroup may still be there.
func (c *CRISource) Pods(ctx context.Context) ([]metadata.Pod, error) {
	if c.err != nil {
		return nil, fmt.Errorf("CRI %s: %w", c.Socket, c.err)
	}
	ctx, cancel := context.WithTimeout(ctx, criTimeout)
	defer cancel()
	sbs, err := c.client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("CRI %s: ListPodSandbox: %w", c.Socket, err)
	}
	cts, err := c.client.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("CRI %s: ListContainers: %w", c.Socket, err)
	}
	pods := fromCRI(sbs.GetItems(), cts.GetContainers(), c.allLabels)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && sameListing(pods, c.last) {
		// The very slice of the last call: the metadata built from it
		// (hold.MetaSource) is kept, not rebuilt, and the weight holder
		// compares no sizes (a pointer compared per scan).
		return c.last, nil
	}
	c.last = pods
	return pods, nil
}

// sameListing reports whether two listings hold the same pods, in any
// order (the runtime lists from a map; fromCRI orders each pod's own
// lists).
func sameListing(a, b []metadata.Pod) bool {
	if len(a) != len(b) {
		return false
	}
	byUID := make(map[string]*metadata.Pod, len(b))
	for i := range b {
		byUID[b[i].UID] = &b[i]
	}
	for i := range a {
		if o, ok := byUID[a[i].UID]; !ok || !reflect.DeepEqual(&a[i], o) {
			return false
		}
	}
	return true
}

func fromCRI(sbs []*runtimeapi.PodSandbox, cts []*runtimeapi.Container, allLabels bool) []metadata.Pod {
	var pods []metadata.Pod
	byUID := map[string]int{}
	bySandbox := map[string]int{}
	newest := map[string]int64{}
	for _, sb := range sbs {
		md := sb.GetMetadata()
		if md.GetUid() == "" {
			continue
		}
		i, ok := byUID[md.GetUid()]
		if !ok {
			i = len(pods)
			byUID[md.GetUid()] = i
			pods = append(pods, metadata.Pod{UID: md.GetUid(), Name: md.GetName(), Namespace: md.GetNamespace()})
		}
		bySandbox[sb.GetId()] = i
		if sb.GetCreatedAt() >= newest[md.GetUid()] {
			newest[md.GetUid()] = sb.GetCreatedAt()
			p := &pods[i]
			if p.SandboxID != "" {
				p.PastSandboxIDs = append(p.PastSandboxIDs, p.SandboxID)
			}
			p.SandboxID = sb.GetId()
			p.RuntimeHandler = sb.GetRuntimeHandler()
			p.StartTime = nsTime(sb.GetCreatedAt())
			// What cgwarden reads, as SlimPod keeps it: the VM labels (all,
			// for a selector) and the cgwarden.io/ annotations.
			p.Labels, p.Annotation = sb.GetLabels(), metadata.OwnAnnotations(sb.GetAnnotations())
			if !allLabels {
				p.Labels = vmLabels(p.Labels)
			}
		} else {
			pods[i].PastSandboxIDs = append(pods[i].PastSandboxIDs, sb.GetId())
		}
	}
	for _, ct := range cts {
		i, ok := bySandbox[ct.GetPodSandboxId()]
		if !ok {
			continue
		}
		// The CRI list gives the creation time; the kubelet's container
		// start time comes from the cgroup's creation, which is the same
		// moment give or take the runtime's setup.
		pods[i].Containers = append(pods[i].Containers, metadata.Container{
			Name: ct.GetMetadata().GetName(), ID: ct.GetId(), StartTime: nsTime(ct.GetCreatedAt()),
		})
	}
	for i := range pods {
		slices.SortFunc(pods[i].Containers, func(x, y metadata.Container) int { return strings.Compare(x.ID, y.ID) })
		slices.Sort(pods[i].PastSandboxIDs)
	}
	return pods
}

func nsTime(ns int64) time.Time {
	if ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}
