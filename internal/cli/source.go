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
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// Sample is one scan-able instant of a node: a snapshot's, or the live
// host's at a time.
type Sample = snapshot.Sample

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

// LoadPods reads --pods; nil when not given.
func LoadPods(file string) (*metadata.Set, error) {
	if file == "" {
		return nil, nil
	}
	pods, err := metadata.ReadPodsFile(file)
	if err != nil {
		return nil, err
	}
	return metadata.NewSet(pods), nil
}

// ScanNode takes the node's picture: from the snapshot's samples, or from
// the live host with two scans interval apart (one when interval is 0).
// The returned node carries CPU rates when two samples were taken.
func ScanNode(o *Options, meta *metadata.Set, interval time.Duration) (*inventory.Node, error) {
	if o.Snapshot != "" {
		s, err := LoadSnapshot(o.Snapshot)
		if err != nil {
			return nil, err
		}
		n, err := inventory.ScanSamples(s.Samples, meta)
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
	return LiveScan(host, meta, interval)
}

// LiveScan scans fsys twice, interval apart, and returns the second scan
// with rates.
func LiveScan(fsys cgroupfs.FS, meta *metadata.Set, interval time.Duration) (*inventory.Node, error) {
	sc, err := inventory.Open(fsys)
	if err != nil {
		return nil, err
	}
	sc.Meta = meta
	first, err := sc.Scan(time.Now())
	if err != nil || interval <= 0 {
		return first, err
	}
	time.Sleep(interval)
	second, err := sc.Scan(time.Now())
	if err != nil {
		return nil, err
	}
	inventory.Rate(first, second)
	return second, nil
}
