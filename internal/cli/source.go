package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/podsource"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// LoadSnapshot opens a snapshot file, or an embedded example.
func LoadSnapshot(name string) (*snapshot.Snapshot, error) {
	var r io.Reader
	if ex, ok := strings.CutPrefix(name, examples.Prefix); ok {
		b, found := examples.Open(ex)
		if !found {
			return nil, fmt.Errorf("no embedded snapshot %q (have: %s)", ex, strings.Join(examples.Names(), ", "))
		}
		r = bytes.NewReader(b)
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	s, err := snapshot.Load(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

// SnapshotWarning is what to tell the user about a loaded snapshot: ""
// when it proved it is whole, else why its replay may not be the node.
func SnapshotWarning(name string, s *snapshot.Snapshot) string {
	if s.Sealed {
		return ""
	}
	return fmt.Sprintf("snapshot %s does not prove it is whole (it has no closing section with a checksum: written before cgwarden sealed its snapshots, or edited): a file cut short or edited would replay as a different node", name)
}

// loadSnapshot loads --snapshot and warns when it is not sealed.
func (o *Options) loadSnapshot() (*snapshot.Snapshot, error) {
	s, err := LoadSnapshot(o.Snapshot)
	if err != nil {
		return nil, err
	}
	if w := SnapshotWarning(o.Snapshot, s); w != "" {
		o.warnf("%s", w)
	}
	return s, nil
}

// checkPodsMatch says on stderr how many pods of the metadata are on the
// node, and how many of the node's pods it does not name. Metadata that
// names none of them is another node's (or another time's): the warning
// is loud, and the audit rules that depend on names skip themselves.
func (o *Options) checkPodsMatch(meta *metadata.Set, n *inventory.Node) {
	if meta == nil && n != nil && len(n.Pods) > 0 && o.metaMissing != "" {
		o.infof("%s", o.metaMissing)
	}
	if meta == nil || n == nil {
		return
	}
	src := o.metaSource
	if src == "" {
		src = "the pod metadata"
	}
	inFile := meta.Pods()
	onNode, matched := len(n.Pods), 0
	for _, p := range n.Pods {
		if _, ok := meta.Pod(p.UID); ok {
			matched++
		}
	}
	switch {
	case len(inFile) == 0:
		o.warnf("%s lists no pod: pods are shown by UID", src)
		return
	case matched == 0 && onNode > 0:
		o.warnf("NONE of the %d pods in %s is on this node (%d pods here): the metadata is from another node or another time. "+
			"Pods are shown by UID, and audit leaves out the findings that depend on the metadata's pods.", len(inFile), src, onNode)
		return
	}
	o.infof("%s: %d of its %d pods are on this node; %d of the node's %d pods are not in it", src, matched, len(inFile), onNode-matched, onNode)
}

// LoadPods reads --pods; nil when not given.
func LoadPods(file string) (*metadata.Set, error) {
	if file == "" {
		return nil, nil
	}
	pods, err := metadata.ReadPodsFile(file)
	if err != nil {
		return nil, err
	}
	// The operator's own file: believed by the rule every command
	// applies to it, serve included (podsource.Vouched).
	set := metadata.NewSet(pods)
	trust, _ := podsource.Vouched(podsource.File)
	set.SetTrust(trust)
	return set, nil
}

// scanNode takes the node's picture through inventory.Sampling: from the
// snapshot's samples, or from the live host with two samples interval
// apart (one when interval is 0). With demand it also fills the
// demand-aware fair share (from the threads' run and wait times and, live,
// ten looks at their states during the interval).
func scanNode(o *Options, meta *metadata.Set, interval time.Duration, demand bool) (*inventory.Node, error) {
	smp := &inventory.Sampling{Meta: meta, Demand: demand}
	if o.Snapshot != "" {
		s, err := o.loadSnapshot()
		if err != nil {
			return nil, err
		}
		n, err := smp.TakeAll(s.Samples)
		if err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		return n, nil
	}
	host, err := cgroupfs.OpenHost(o.HostRoot)
	if err != nil {
		return nil, err
	}
	defer host.Close()
	sc, err := inventory.Open(host)
	if err != nil {
		return nil, err
	}
	show := o.progress("measuring CPU")
	if demand {
		show = o.progress("measuring CPU and demand")
	}
	defer show.done()
	return smp.Live(sc, interval, runnableLooks, func(i, n int) { show.step(interval, i, n) })
}

// runnableLooks is how many times the threads' states are looked at
// during a live interval.
const runnableLooks = 10
