package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/apiconn"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/podsource"
	"github.com/cgwarden/cgwarden/internal/serve"
	"github.com/cgwarden/cgwarden/internal/sizetrust"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// MetaFlags choose where inspect and audit take pod names from: the
// sources serve uses (internal/podsource).
type MetaFlags struct {
	// Mode is --metadata; "" (commands without the flag) reads --pods only.
	Mode       string
	CRISocket  string
	Kubeconfig string
	NodeName   string
	// TrustSizes is --trust-size-annotations.
	TrustSizes string
	// MaxSize is --max-size (vmsize.ParseMaxSizes).
	MaxSize string
}

// maxSizeUsage is --max-size's help, the same in serve, audit and
// inspect (and in cgwarden-sizer: internal/sizercmd).
const maxSizeUsage = "bound the CPU size believed for each namespace's pods; `BOUNDS` are NAMESPACE=CPU[,NAMESPACE=CPU...], " +
	"NAMESPACE a namespace or * for every namespace not named, CPU a quantity (8, 2500m); a VM's, a runner's or an annotation's " +
	"size above its namespace's bound is capped at the bound (the audit's sizes say capped, and why), as every size is at the Node's allocatable CPU. " +
	"Give cgwarden-sizer the same bounds: it holds its requests to them"

// metaSyncTimeout bounds the wait for the API server's first list of
// the node's pods in a one-shot command (serve waits 30 s: it has time).
const metaSyncTimeout = 5 * time.Second

// addMeta adds --metadata and the flags of its sources.
func addMeta(cmd *cobra.Command, o *Options) {
	f := cmd.Flags()
	f.StringVar(&o.Meta.Mode, "metadata", podsource.Auto, "the `SOURCE` of pod and container names: "+strings.Join(podsource.Modes, ", ")+
		" (auto: --pods if given, else the CRI socket if there is one, else the Kubernetes API if a kubeconfig or in-cluster config is there, else none; with --snapshot, only --pods)")
	f.StringVar(&o.Meta.CRISocket, "cri-socket", "", "the CRI runtime's `SOCKET` (default: the first of "+strings.Join(podsource.DefaultCRISockets, ", ")+" that exists)")
	f.StringVar(&o.Meta.Kubeconfig, "kubeconfig", "", "the kubeconfig `FILE` of the Kubernetes metadata source (default: $KUBECONFIG, else ~/.kube/config if it exists, else in-cluster config)")
	f.StringVar(&o.Meta.NodeName, "node-name", "", "this node's `NAME`, for the Kubernetes source (default: $NODE_NAME, else the hostname)")
	f.StringVar(&o.Meta.TrustSizes, "trust-size-annotations", "", "with pods from a live source (CRI, Kubernetes API), believe the "+vmsize.AnnotationCPU+" annotation in these `NAMESPACES` (comma-separated, or *); beyond them it counts only when the size policy is installed (checked through the API server). A --pods file is the operator's input: its annotations are believed")
	f.StringVar(&o.Meta.MaxSize, "max-size", "", "with pods from a live source, "+maxSizeUsage+". A --pods file is not bounded")
}

// LoadMeta gathers the pod metadata (see podMetadata) and, when given,
// --vms, whose VM sizes are tied to the pods by their labels. nil when
// there is none.
func LoadMeta(o *Options) (*metadata.Set, error) {
	meta, err := o.podMetadata()
	if err != nil {
		return nil, err
	}
	if err := applyVMsFile(meta, o.VMsFile); err != nil {
		return nil, err
	}
	return meta, nil
}

// applyVMsFile ties the VM sizes of the --vms file (none when "") to the
// pods of meta.
func applyVMsFile(meta *metadata.Set, path string) error {
	if path == "" {
		return nil
	}
	if meta == nil {
		return fmt.Errorf("--vms needs pod metadata (--pods, or a CRI socket or API server --metadata reaches): a VM's size is tied to its pod by the pod's labels")
	}
	vms, err := metadata.ReadVMsFile(path)
	if err != nil {
		return err
	}
	for _, vm := range meta.ApplyVMs(vms) {
		slog.Debug("VM without a pod in the pod metadata", "vm", vm.Namespace+"/"+vm.Name, "kind", vm.Kind)
	}
	return nil
}

// podMetadata reads the pods from the source --metadata chooses. A
// snapshot comes from another node (or another time): in auto mode only
// --pods can name its pods. A source chosen explicitly that does not
// answer is an error; in auto mode it is a warning and pods are shown by
// UID.
func (o *Options) podMetadata() (*metadata.Set, error) {
	mode := o.Meta.Mode
	o.metaSource, o.metaMissing = "", ""
	switch {
	case mode == "" || (mode == podsource.Auto && (o.PodsFile != "" || o.Snapshot != "")):
		if o.PodsFile == "" {
			return nil, nil
		}
		o.metaSource = "--pods " + o.PodsFile
		return LoadPods(o.PodsFile)
	case mode == podsource.None:
		return nil, nil
	case mode == podsource.File:
		if o.PodsFile == "" {
			return nil, fmt.Errorf("--metadata file needs --pods FILE")
		}
		o.metaSource = "--pods " + o.PodsFile
		return LoadPods(o.PodsFile)
	}
	return o.listPods(mode)
}

// listPods asks the source --metadata chooses (auto: the first that
// answers) for the node's pods.
func (o *Options) listPods(mode string) (*metadata.Set, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lister, source, err := podsource.Open(ctx, o.sourceConfig(mode), o.metaLogger())
	if err != nil {
		return nil, err
	}
	if cl := podsource.Closer(lister); cl != nil {
		defer cl()
	}
	if lister == nil {
		if mode == podsource.Auto {
			o.metaMissing = "no pod metadata: no CRI socket, kubeconfig or in-cluster config answers, so pods are shown by UID (--pods FILE names them)"
		}
		return nil, nil
	}
	pods, err := lister.Pods(ctx)
	if err != nil {
		if mode == podsource.Auto {
			o.warnf("pod metadata from the %s unavailable (%v): pods are shown by UID", sourceName(source), err)
			return nil, nil
		}
		return nil, fmt.Errorf("--metadata %s: %w", mode, err)
	}
	o.metaSource = "the " + sourceName(source)
	set := metadata.NewSet(pods)
	trust, vouched := podsource.Vouched(source)
	if !vouched {
		var node metadata.NodeInfo
		if trust, node, err = o.liveTrust(ctx, o.sourceConfig(mode)); err != nil {
			return nil, err
		}
		set.SetNodeInfo(node)
	}
	set.SetTrust(trust)
	return set, nil
}

// liveTrust is what a command believes of pods read from the node's
// runtime or the API server: what serve believes (sizetrust), checked once;
// and what the Node says of the node, as serve's audit header has it.
func (o *Options) liveTrust(ctx context.Context, cfg podsource.Config) (metadata.Trust, metadata.NodeInfo, error) {
	ns, err := metadata.ParseNamespaces(o.Meta.TrustSizes)
	if err != nil {
		return metadata.Trust{}, metadata.NodeInfo{}, fmt.Errorf("--trust-size-annotations: %w", err)
	}
	bounds, err := vmsize.ParseMaxSizes(o.Meta.MaxSize)
	if err != nil {
		return metadata.Trust{}, metadata.NodeInfo{}, fmt.Errorf("--max-size: %w", err)
	}
	ch := &sizetrust.Checker{Node: cfg.NodeName, Namespaces: ns, MaxSizes: bounds}
	if cfg.Kubeconfig != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		if rc, err := apiconn.RESTConfig(cfg.Kubeconfig, nil); err == nil {
			if dyn, err := sizetrust.NewClient(rc); err == nil {
				ch.API = dyn
			}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // one answer, then the watches stop
	ch.Start(ctx, 10*time.Second)
	return ch.Trust(), ch.NodeInfo(), nil
}

// sourceConfig fills the source's configuration with the defaults a
// command run by hand expects: kubectl's kubeconfig, the node's name.
func (o *Options) sourceConfig(mode string) podsource.Config {
	// AllLabels: a command run by hand lists once, and -l reads any label.
	cfg := podsource.Config{Mode: mode, CRISocket: o.Meta.CRISocket, HostRoot: o.HostRoot, AllLabels: true,
		Kubeconfig: o.Meta.Kubeconfig, NodeName: serve.NodeName(o.Meta.NodeName), PodsFile: o.PodsFile, SyncTimeout: metaSyncTimeout}
	if cfg.Kubeconfig == "" {
		cfg.Kubeconfig = defaultKubeconfig()
	}
	return cfg
}

// defaultKubeconfig is kubectl's: the first file of $KUBECONFIG, else
// ~/.kube/config when it exists; "" for none (in-cluster config, if any).
func defaultKubeconfig() string {
	if env := os.Getenv("KUBECONFIG"); env != "" {
		for _, f := range filepath.SplitList(env) {
			if _, err := os.Stat(f); err == nil {
				return f
			}
		}
		return ""
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	f := filepath.Join(home, ".kube", "config")
	if _, err := os.Stat(f); err != nil {
		return ""
	}
	return f
}

// metaLogger is the pod sources' logger. Their progress and their
// warnings are written for the agent's log; a command run by hand says
// what it found in its own words (podMetadata), and shows theirs with
// --log-level debug.
func (o *Options) metaLogger() *slog.Logger {
	if strings.EqualFold(o.LogLevel, "debug") {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(o.stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

func sourceName(s string) string {
	switch s {
	case podsource.CRI:
		return "CRI runtime"
	case podsource.Kubernetes:
		return "Kubernetes API"
	}
	return s + " source"
}

func addVMs(cmdFlags interface {
	StringVar(*string, string, string, string)
}, o *Options) {
	cmdFlags.StringVar(&o.VMsFile, "vms", "", "VM sizes: a `FILE` holding the output of kubectl get virtualmachines.vm.neon.tech -A -o json and/or kubectl get vmis -A -o json (needs pod metadata)")
}
