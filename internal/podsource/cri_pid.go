package podsource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerPID asks the runtime for the host PID of a running container's
// first process (its init; for a sandbox, the pause process): the
// evidence that adoption checks a misplaced cgroup against
// (inventory.Evidence). It is the verbose ContainerStatus (or
// PodSandboxStatus), whose "info" entry is the runtime's own JSON:
// containerd and CRI-O both give "pid" there. Only a few misplaced
// containers are asked about, when they are: the verbose answer carries
// the container's whole OCI spec, too much to ask for every container at
// every listing.
func (c *CRISource) ContainerPID(ctx context.Context, id string, sandbox bool) (int, error) {
	if c.err != nil {
		return 0, fmt.Errorf("CRI %s: %w", c.Socket, c.err)
	}
	ctx, cancel := context.WithTimeout(ctx, criTimeout)
	defer cancel()
	if sandbox {
		r, err := c.client.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
		if err != nil {
			return 0, fmt.Errorf("CRI %s: PodSandboxStatus %.12s: %w", c.Socket, id, err)
		}
		if st := r.GetStatus().GetState(); st != runtimeapi.PodSandboxState_SANDBOX_READY {
			return 0, fmt.Errorf("CRI %s: sandbox %.12s is %s, not ready: it has no process", c.Socket, id, st)
		}
		return ParseStatusPID(r.GetInfo())
	}
	r, err := c.client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return 0, fmt.Errorf("CRI %s: ContainerStatus %.12s: %w", c.Socket, id, err)
	}
	if st := r.GetStatus().GetState(); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return 0, fmt.Errorf("CRI %s: container %.12s is %s, not running: it has no process", c.Socket, id, st)
	}
	return ParseStatusPID(r.GetInfo())
}

// errNoPID is a verbose status without a PID in its "info".
var errNoPID = errors.New(`the runtime's verbose status has no "pid" in its "info"`)

// ParseStatusPID reads the PID from the info map of a verbose
// ContainerStatus or PodSandboxStatus: {"info": "{... \"pid\": 1234 ...}"}
// (containerd's containerInfo and sandboxInfo, CRI-O's). A missing or
// non-positive PID is an error: unknown is not a process.
func ParseStatusPID(info map[string]string) (int, error) {
	raw, ok := info["info"]
	if !ok {
		return 0, errNoPID
	}
	var v struct {
		PID *int64 `json:"pid"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return 0, fmt.Errorf(`the runtime's verbose status "info": %w`, err)
	}
	if v.PID == nil {
		return 0, errNoPID
	}
	if *v.PID <= 0 || *v.PID > 1<<22 { // PID_MAX_LIMIT is 2^22
		return 0, fmt.Errorf(`the runtime's verbose status gives pid %d`, *v.PID)
	}
	return int(*v.PID), nil
}
