package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cgwarden/cgwarden/internal/apiconn"
	"github.com/cgwarden/cgwarden/internal/events"
	"github.com/cgwarden/cgwarden/internal/hold"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/podsource"
	"github.com/cgwarden/cgwarden/internal/sizetrust"
)

// Meta is the agent's API-facing half, the first thing Complete opens:
// where the node's pods come from, the Events it sends and, for the live
// node, the sizes that the loop and the holder read (the pods, the VM
// objects they reference, the size-trust check). It touches no cgroup.
// The scale lane opens one per simulated node (test/scale), so the agents
// whose cost it measures are this code and not a copy of it.
type Meta struct {
	// Lister is the node's pods (Config.Lister, else podsource.Open's).
	Lister metadata.Lister
	// Source names where they come from (podsource's mode, "given").
	Source string
	// Note sends the node's Events (--events); nil without.
	Note *events.Notifier
	// Sizes is the pods with the sizes the agent believes; nil when
	// serving a snapshot.
	Sizes *hold.MetaSource
	// Changes is notified whenever a source of the sizes changes: the
	// pods' informer, the VM objects' watches, the size policy, its
	// binding and the Node (sizetrust). Notifying says whether every
	// source of the sizes notifies (the holder then need not look on a
	// timer).
	Changes   *metadata.Changes
	Notifying bool

	c          *Config
	collectors []prometheus.Collector
	closes     []func()
}

// OpenMeta opens c's pod source, its Events and, unless c serves a
// snapshot, its sizes. Close releases them.
func (c *Config) OpenMeta(ctx context.Context) (_ *Meta, err error) {
	m := &Meta{c: c, Lister: c.Lister, Source: "given", Changes: metadata.NewChanges()}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if m.Lister == nil {
		if m.Lister, m.Source, err = podsource.Open(ctx, c.sourceConfig(), c.Log); err != nil {
			return nil, err
		}
		if cl := podsource.Closer(m.Lister); cl != nil {
			m.closes = append(m.closes, cl)
		}
	}
	if c.Events {
		rc, err := apiconn.RESTConfig(c.Kubeconfig, c.WrapTransport)
		if err != nil {
			return nil, fmt.Errorf("--events needs the API server (--kubeconfig, or in-cluster): %w", err)
		}
		note, stop, err := events.New(rc, c.NodeName, c.Log)
		if err != nil {
			return nil, err
		}
		m.Note = note
		m.closes = append(m.closes, stop)
	}
	if c.Snapshot == "" {
		m.openSizes(ctx)
	}
	return m, nil
}

// Close releases what OpenMeta opened.
func (m *Meta) Close() {
	for _, f := range m.closes {
		f()
	}
	m.closes = nil
}

// openSizes builds Sizes over the pods, with the size-trust check and
// the live VM objects; each source's changes are forwarded to Changes.
func (m *Meta) openSizes(ctx context.Context) {
	c := m.c
	trust, nodeInfo := m.sizeTrust(ctx)
	src := &hold.MetaSource{Lister: noPods{}, VMsFile: c.VMsFile, Trust: trust, NodeInfo: nodeInfo, Log: c.Log.With("component", "sizes")}
	if n, ok := m.Lister.(notifier); ok {
		src.Lister, m.Notifying = m.Lister, c.VMsFile == ""
		m.forward(ctx, n.Changes())
	} else if m.Lister != nil {
		src.Lister = m.Lister
	}
	if live := m.liveVMs(ctx); live != nil {
		src.Live = live
		m.forward(ctx, live.Changes())
		m.collectors = append(m.collectors, vmWatchGauges(live)...)
	}
	m.Sizes = src
}

// sizeTrustWait is how long the agent waits at start for the size-trust
// watches' first lists (then it starts with what it has: nothing trusted
// beyond the flag until they answer).
const sizeTrustWait = 10 * time.Second

// sizeTrust says which pod sizes the agent believes. A pods file (--pods)
// is believed as every other command believes it (podsource.Vouched): the
// operator's own input, so `serve --fix` holds what `fix --apply` set from
// the same file instead of undoing it. Pods from a live source get the
// live check (sizetrust): --trust-size-annotations' namespaces, the size
// policy and the Node's allocatable CPU, read from the API server when
// there is one, and --max-size's bounds. nodeInfo is what the same Node
// watch says of the node (its container runtime, for the audit's node
// header); nil with a pods file, where no Node is watched.
func (m *Meta) sizeTrust(ctx context.Context) (trust func() metadata.Trust, nodeInfo func() metadata.NodeInfo) {
	c := m.c
	if t, ok := podsource.Vouched(m.Source); ok {
		c.Log.Info("trusted pod sizes", "component", "sizetrust", "annotations", t.Annotations, "trustedBy", t.TrustedBy,
			"allocatableUnknown", t.AllocatableUnknown)
		if c.MaxSizes.String() != "" {
			c.Log.Info("--max-size does not bound the sizes of a pods file: the operator's own input, believed as every command believes it",
				"component", "sizetrust", "maxSizes", c.MaxSizes.String())
		}
		return func() metadata.Trust { return t }, nil
	}
	ch := &sizetrust.Checker{Node: c.NodeName, Namespaces: c.TrustNamespaces, MaxSizes: c.MaxSizes, Log: c.Log.With("component", "sizetrust"), Changes: m.Changes}
	if rc, err := apiconn.RESTConfig(c.Kubeconfig, c.WrapTransport); err == nil {
		if dyn, err := sizetrust.NewClient(rc); err == nil {
			ch.API = dyn
		}
		// Its own Node as the node first, as the pods are read
		// (podsource.AsNode; deploy/kustomize/components/node-scoped).
		if c.NodeName != "" {
			if dyn, err := sizetrust.NewClient(podsource.AsNode(rc, c.NodeName)); err == nil {
				ch.NodeAPI = dyn
			}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	m.closes = append(m.closes, cancel)
	ch.Start(ctx, sizeTrustWait)
	return ch.Trust, ch.NodeInfo
}

// notifier is a pod source that says when its pods change (the
// Kubernetes source's informer).
type notifier interface{ Changes() *metadata.Changes }

// forward passes from's notifications on to Changes until ctx ends (or
// Close).
func (m *Meta) forward(ctx context.Context, from *metadata.Changes) {
	ctx, cancel := context.WithCancel(ctx)
	m.closes = append(m.closes, cancel)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-from.C():
				m.Changes.Notify()
			}
		}
	}()
}

// liveVMs watches, for --fix when pod metadata comes from the API server,
// the VM objects that this node's pods reference (one watch per VM, none
// on the cluster's other VMs): NeonVM's live size then reaches the holder
// (and what is served) as it changes. nil otherwise (sizes from --vms,
// the runner's arguments and annotations).
func (m *Meta) liveVMs(ctx context.Context) *podsource.VMWatches {
	c := m.c
	if !c.fixing() || (c.Metadata != podsource.Kubernetes && c.Metadata != podsource.Auto) {
		return nil
	}
	rc, err := apiconn.RESTConfig(c.Kubeconfig, c.WrapTransport)
	if err != nil {
		return nil // no API server: nothing to watch
	}
	v, err := podsource.OpenVMWatches(ctx, rc, c.Log)
	if err != nil {
		c.Log.Warn("not watching VM objects", "err", err)
		return nil
	}
	m.closes = append(m.closes, v.Close)
	return v
}
