package hold

import (
	"context"
	"log/slog"
	"os"
	"sync"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// MetaSource turns a pod lister and an optional VMs file into Sizes. The
// VMs file (`kubectl get virtualmachines.vm.neon.tech -A -o json`, VMIs)
// is read again whenever it changes, so a VM's live size (NeonVM's
// spec.guest.cpus.use, which its autoscaler moves) is a new target. The
// set is rebuilt only when the pods, the VMs, the trust or the Node's
// info changed; with an informer lister and Live that is a pointer and a
// number compared per call.
type MetaSource struct {
	Lister  metadata.Lister
	VMsFile string
	// Live reads the VM objects the node's pods reference
	// (podsource.VMWatches: one watch per VM); may be nil. Track is
	// called with the pods whenever the lister's slice changes; VMs
	// returns the VMs read and a generation that changes with them.
	Live interface {
		Track(pods []metadata.Pod)
		VMs() ([]metadata.VM, uint64)
	}
	// Trust says which declared sizes to believe (podsource.Vouched's
	// for a pods file, else sizetrust.Checker's Trust); nil keeps the
	// Set's default, the operator's trust.
	Trust func() metadata.Trust
	// NodeInfo says what the Node object says of the node
	// (sizetrust.Checker's NodeInfo), for the audit's node header; nil:
	// unknown.
	NodeInfo func() metadata.NodeInfo
	// Log, when set, hears each declared size the set does not believe,
	// once per pod and reason (at start, and as sizes or trust change).
	Log *slog.Logger

	mu sync.Mutex
	// told is the reason last logged per pod UID.
	told    map[string]string
	trust   metadata.Trust
	node    metadata.NodeInfo
	live    []metadata.VM
	liveGen uint64
	vms     []metadata.VM
	vmStamp [2]int64
	pods    []metadata.Pod
	set     *metadata.Set
}

// Sizes implements the Sizes function.
func (m *MetaSource) Sizes(ctx context.Context) (*metadata.Set, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pods, err := m.Lister.Pods(ctx)
	if err != nil {
		return nil, err
	}
	podsChanged := m.set == nil || !samePods(pods, m.pods)
	vmsChanged, err := m.readVMs()
	if err != nil {
		return nil, err
	}
	if m.Live != nil {
		if podsChanged {
			m.Live.Track(pods)
		}
		if live, gen := m.Live.VMs(); m.set == nil || gen != m.liveGen {
			m.live, m.liveGen, vmsChanged = live, gen, true
		}
	}
	trustChanged := false
	if m.Trust != nil {
		if t := m.Trust(); t != m.trust {
			m.trust, trustChanged = t, true
		}
	}
	nodeChanged := false
	if m.NodeInfo != nil {
		if n := m.NodeInfo(); n != m.node {
			m.node, nodeChanged = n, true
		}
	}
	if !podsChanged && !vmsChanged && !trustChanged && !nodeChanged {
		return m.set, nil
	}
	set := metadata.NewSet(pods)
	if m.Trust != nil {
		set.SetTrust(m.trust)
	}
	set.SetNodeInfo(m.node)
	set.ApplyVMs(m.vms)
	set.ApplyVMs(m.live)
	m.pods, m.set = pods, set
	m.tell(set)
	return set, nil
}

// tell logs each declared size set does not take, once per pod and
// reason: a size that buys no weight is said out loud when it is first
// refused, not left for someone to find in /audit after the VMs starved.
func (m *MetaSource) tell(set *metadata.Set) {
	if m.Log == nil {
		return
	}
	now := map[string]string{}
	for _, o := range set.Origins() {
		if o.Ignored == "" {
			continue
		}
		now[o.Pod.UID] = o.Ignored
		if m.told[o.Pod.UID] == o.Ignored {
			continue
		}
		m.Log.Warn("pod size not believed: the pod keeps the kubelet's weight", "pod", o.Pod.Namespace+"/"+o.Pod.Name,
			"namespace", o.Pod.Namespace, "uid", o.Pod.UID, "size", o.Via, "declaredMilliCPU", o.DeclaredMilliCPU, "reason", o.Ignored)
	}
	m.told = now
}

// samePods reports whether a lister returned the very slice it returned
// before (file and informer sources return the same slice until
// something changed).
func samePods(a, b []metadata.Pod) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func (m *MetaSource) readVMs() (changed bool, err error) {
	if m.VMsFile == "" {
		return false, nil
	}
	st, err := os.Stat(m.VMsFile)
	if err != nil {
		return false, err
	}
	stamp := [2]int64{st.Size(), st.ModTime().UnixNano()}
	if stamp == m.vmStamp && m.vms != nil {
		return false, nil
	}
	vms, err := metadata.ReadVMsFile(m.VMsFile)
	if err != nil {
		return false, err
	}
	if vms == nil {
		vms = []metadata.VM{}
	}
	m.vms, m.vmStamp = vms, stamp
	return true, nil
}
