package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/cgwarden/cgwarden/internal/answerproof"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/podsource"
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/serve"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// Options are what `cgwarden serve`'s flags say, unchecked.
type Options struct {
	Listen, LocalListen string
	// ListenIP, when set, takes the place of Listen's host: the node's
	// own address (the downward API's status.hostIP), so that a
	// host-network agent answers where metrics-server and Prometheus
	// reach it (the Node's address, the pod's IP) and on no other
	// address of a node with several.
	ListenIP string
	// LocalReader is the ServiceAccount (in Pod's namespace) whose
	// audience-bound tokens open LocalListen under Authenticate.
	LocalReader string
	// Pod is the agent's own pod (from the downward API): what the
	// reader's tokens must be bound to, and whose ServiceAccount signs
	// the loopback listener's answers.
	Pod answerproof.Pod
	// ListenWait is how long to keep trying to listen while an address
	// is in use (serve.Endpoint.Wait; 0: fail the start at once).
	ListenWait  time.Duration
	AllowRemote bool
	Interval    time.Duration
	// Metadata is the pod source mode (podsource.Modes).
	Metadata, CRISocket, Kubeconfig, NodeName string
	TLSCertFile, TLSKeyFile                   string
	Authenticate, Events, Demand, FullScans   bool
	// NRIMetrics is the loopback address of `cgwarden nri`'s metrics,
	// relayed on /metrics/nri ("": not served).
	NRIMetrics string

	// Fix are the rules kept fixed (none: observe only).
	Fix []string
	// KeepEmptySource leaves a misplaced container's cgroup in place on a
	// cgroup v2 node once adoption has emptied it (by default it is
	// removed there: see the --keep-empty-source flag).
	KeepEmptySource bool
	JournalDir      string
	// MaxTierCPU caps the sizes the BestEffort tier's weight counts (a
	// CPU quantity; "" for the node's CPUs).
	MaxTierCPU string
	SizeCheck  time.Duration
	// TrustSizes are the namespaces whose size annotations are believed
	// without the size policy (--trust-size-annotations: comma-separated,
	// or * for all).
	TrustSizes string
	// MaxSize is --max-size: NAMESPACE=CPU bounds on the sizes believed
	// for each namespace's pods (vmsize.ParseMaxSizes; "" none).
	MaxSize string

	HostRoot, PodsFile, VMsFile string
	// Snapshot names a snapshot served instead of the live host; Feed
	// feeds it (the command's loader, which knows the embedded examples).
	Snapshot string
	Feed     func(ctx context.Context, srv *serve.Server, lister metadata.Lister) error

	// Lister, when set, is the pod source instead of Metadata's (a test's,
	// or an embedder's).
	Lister metadata.Lister
	// Base is the cgroup the scans start from ("" or "/": the whole node;
	// a test's scratch cgroup).
	Base string

	Log *slog.Logger
	// WrapTransport wraps every API client's transport (an
	// apiconn.Reach's Wrap).
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// Validate checks the options alone.
func (o *Options) Validate() error {
	listen, err := o.listen()
	if err != nil {
		return err
	}
	if err := serve.CheckListen(listen, o.AllowRemote); err != nil {
		return err
	}
	if o.LocalListen != "" {
		if err := serve.CheckLocalListen(o.LocalListen); err != nil {
			return err
		}
	}
	if o.NRIMetrics != "" {
		if err := serve.CheckNRIMetrics(o.NRIMetrics); err != nil {
			return err
		}
	}
	if o.Interval <= 0 {
		return fmt.Errorf("--interval must be above 0")
	}
	if len(o.Fix) > 0 && o.Snapshot != "" {
		return fmt.Errorf("--fix changes the live node; it cannot be used with --snapshot")
	}
	if _, err := metadata.ParseNamespaces(o.TrustSizes); err != nil {
		return fmt.Errorf("--trust-size-annotations: %w", err)
	}
	if _, err := vmsize.ParseMaxSizes(o.MaxSize); err != nil {
		return fmt.Errorf("--max-size: %w", err)
	}
	return nil
}

// Config is the checked configuration: flags parsed once.
type Config struct {
	Options
	NodeName string
	TLS      *tls.Config
	// Weights are the weight rules the holder holds; Adopt whether
	// misplaced containers are adopted.
	Weights         []string
	Adopt           bool
	MaxTierMilliCPU int64
	// TrustNamespaces are TrustSizes parsed.
	TrustNamespaces string
	// MaxSizes is MaxSize parsed.
	MaxSizes vmsize.MaxSizes
}

// Config validates o and parses what needs parsing.
func (o *Options) Config() (*Config, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	c := &Config{Options: *o, NodeName: serve.NodeName(o.NodeName)}
	var err error
	if c.Listen, err = o.listen(); err != nil {
		return nil, err
	}
	if c.TrustNamespaces, err = metadata.ParseNamespaces(o.TrustSizes); err != nil {
		return nil, fmt.Errorf("--trust-size-annotations: %w", err)
	}
	if c.MaxSizes, err = vmsize.ParseMaxSizes(o.MaxSize); err != nil {
		return nil, fmt.Errorf("--max-size: %w", err)
	}
	if c.TLS, err = serve.LoadTLS(o.TLSCertFile, o.TLSKeyFile); err != nil {
		return nil, err
	}
	for _, r := range o.Fix {
		switch {
		case r == rules.MisplacedContainer:
			c.Adopt = true
		case slices.Contains(plan.Rules, r):
			c.Weights = append(c.Weights, r)
		default:
			return nil, fmt.Errorf("--fix %s: serve keeps fixed only %s", r, strings.Join(plan.Rules, ", "))
		}
	}
	if o.MaxTierCPU != "" {
		m, err := metadata.TierCPU(o.MaxTierCPU)
		if err != nil {
			return nil, err
		}
		c.MaxTierMilliCPU = m
	}
	return c, nil
}

// fixing reports whether anything is kept fixed.
func (c *Config) fixing() bool { return len(c.Weights) > 0 || c.Adopt }

// sourceConfig is where pod names come from. A snapshot comes from
// another node: only a file can name its pods.
func (c *Config) sourceConfig() podsource.Config {
	mode := c.Metadata
	if c.Snapshot != "" && mode == podsource.Auto {
		mode = podsource.None
		if c.PodsFile != "" {
			mode = podsource.File
		}
	}
	return podsource.Config{Mode: mode, CRISocket: c.CRISocket, HostRoot: c.HostRoot,
		Kubeconfig: c.Kubeconfig, NodeName: c.NodeName, PodsFile: c.PodsFile, WrapTransport: c.WrapTransport}
}

// listen is the address to serve on: Listen, with ListenIP for its host
// when set.
func (o *Options) listen() (string, error) {
	if o.ListenIP == "" {
		return o.Listen, nil
	}
	ip, err := netip.ParseAddr(o.ListenIP)
	if err != nil || ip.Zone() != "" {
		return "", fmt.Errorf("--listen-ip %q: want an IP address, the node's (the downward API's status.hostIP)", o.ListenIP)
	}
	_, port, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return "", fmt.Errorf("--listen %q: %w", o.Listen, err)
	}
	return net.JoinHostPort(ip.String(), port), nil
}
