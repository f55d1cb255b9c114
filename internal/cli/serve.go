package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cgwarden/cgwarden/internal/agent"
	"github.com/cgwarden/cgwarden/internal/answerproof"
	"github.com/cgwarden/cgwarden/internal/apiconn"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/plan"
	"github.com/cgwarden/cgwarden/internal/podsource"
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/serve"
	"github.com/cgwarden/cgwarden/internal/sizetrust"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// serveOptions are serve's flags: agent.Options, and the flag values
// whose types the flag set needs.
type serveOptions struct {
	agent.Options
	interval, check Duration
}

// newServeOptions are serve's options before flags are parsed.
func newServeOptions() *serveOptions {
	return &serveOptions{interval: Duration(serve.DefaultInterval), check: 0}
}

func newServe(o *Options) *cobra.Command {
	so := newServeOptions()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve pod and container CPU and memory from where the processes really are, in the kubelet's formats (/metrics/resource, /stats/summary) and as Prometheus metrics (/metrics)",
		Long: `serve scans the node's cgroups once per --interval and serves the latest scan:
  /metrics/resource  the kubelet's resource metrics (for metrics-server)
  /stats/summary     the kubelet's Summary API (CPU and memory)
  /metrics           cgwarden's own metrics
  /metrics/nri       cgwarden nri's metrics, relayed from its loopback listener (--nri-metrics)
  /audit, /inspect   the node's audit and inventory, as audit and inspect -o json write them
                     (also on --local-listen, for kubectl cgwarden; with --authenticate, a token there too)
  /healthz, /readyz  health; ready once the first scan completed
Pod figures include containers a runtime put outside the pod's cgroup. With --snapshot it serves the snapshot's scan.

With --fix it also keeps the node fixed: misplaced-container adopts misplaced containers every
--interval; size-blind-weights and besteffort-starvation hold the weights of sized BestEffort pods
(VMs) against the kubelet, restoring any overwrite within milliseconds (inotify) and following new
pods and size changes. Every first change is journaled: stop serve, then 'cgwarden revert --all'.`,
		Example: `  cgwarden serve
  cgwarden serve --listen 0.0.0.0:10250 --allow-remote --tls-cert-file tls.crt --tls-private-key-file tls.key
  cgwarden serve --snapshot example:seed-003-k3s-spin   # then: curl 127.0.0.1:9530/metrics/resource
  cgwarden serve --pods pods.json --vms vms.json --fix size-blind-weights,besteffort-starvation`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd.Context(), o, so) },
	}
	so.addFlags(cmd.Flags(), o)
	return cmd
}

func (so *serveOptions) addFlags(f *pflag.FlagSet, o *Options) {
	a := &so.Options
	f.StringVar(&a.Listen, "listen", serve.DefaultListen, "address to serve on; beyond loopback needs --allow-remote")
	f.StringVar(&a.ListenIP, "listen-ip", "", "serve --listen's port on this `IP` instead of its host: the node's own address (a DaemonSet passes the downward API's status.hostIP), so that the agent answers where metrics-server and Prometheus reach it and on no other address of the node")
	f.StringVar(&a.LocalListen, "local-listen", "", "also serve the node's audit and inventory (/audit, /inspect, as audit and inspect -o json write them) and health, in plain HTTP, on this loopback `ADDR`: what kubectl cgwarden reaches through the API server's pods/portforward (off when empty). With --authenticate it takes only tokens of --local-reader bound to the agent's node, and signs each answer with a token of the pod's ServiceAccount (docs/kubectl-plugin.md); the pod is named by $POD_NAMESPACE, $POD_NAME, $POD_UID and $POD_SERVICE_ACCOUNT (the downward API)")
	f.StringVar(&a.LocalReader, "local-reader", answerproof.DefaultReader, "with --local-listen and --authenticate: the ServiceAccount, in the agent's namespace, whose tokens for audience "+answerproof.ReaderAudience+" bound to the agent's node open the loopback listener (kubectl cgwarden asks the API server for one: create on serviceaccounts/token of this ServiceAccount is who may read the node's audit)")
	f.DurationVar(&a.ListenWait, "listen-wait", 0, "while --listen or --local-listen is in use, try again every second for this long before failing (0: fail at once). For a DaemonSet update with maxSurge whose old agent runs as another user: SO_REUSEPORT shares the address only within one user, and the old agent goes once the new pod is Ready")
	f.BoolVar(&a.AllowRemote, "allow-remote", false, "allow a --listen address reachable from other hosts (use --authenticate there, or a network policy)")
	f.Var(&so.interval, "interval", "time between two scans; every request reads the latest scan")
	f.StringVar(&a.Metadata, "metadata", podsource.Auto, "where pod and container names come from: "+strings.Join(podsource.Modes, ", ")+" (auto: --pods if given, else the CRI socket, else the Kubernetes API)")
	f.StringVar(&a.CRISocket, "cri-socket", "", "CRI runtime socket (default: the first of "+strings.Join(podsource.DefaultCRISockets, ", ")+" that exists)")
	f.StringVar(&a.Kubeconfig, "kubeconfig", "", "kubeconfig for the Kubernetes metadata source (default: in-cluster config)")
	f.StringVar(&a.NodeName, "node-name", "", "this node's name (default: $NODE_NAME, else the hostname)")
	f.StringVar(&a.TLSCertFile, "tls-cert-file", "", "serve HTTPS with this certificate (PEM), as metrics-server expects of a kubelet")
	f.StringVar(&a.TLSKeyFile, "tls-private-key-file", "", "private key (PEM) of --tls-cert-file")
	f.BoolVar(&a.Authenticate, "authenticate", false, "like the kubelet: serve HTTPS and accept only bearer tokens a TokenReview accepts and a SubjectAccessReview allows get on nodes/metrics (/metrics, /metrics/resource) or nodes/stats (/stats/summary); health endpoints stay open. Uses --kubeconfig or the in-cluster config")
	f.StringVar(&a.NRIMetrics, "nri-metrics", "", "also serve cgwarden nri's /metrics, read from its --listen on this loopback `ADDR`, as /metrics/nri, behind the TLS and authentication of /metrics (nodes/metrics): how Prometheus reaches the plugin, which listens on the node's loopback only (off when empty)")
	f.BoolVar(&a.Events, "events", false, "report each new finding and each applied fix as a Kubernetes Event on its pod (needs --kubeconfig or in-cluster; aggregated and rate-limited, at most 20 finding Events per scan)")
	f.BoolVar(&a.FullScans, "full-scans", false, "read every cgroup file at every scan, as one-shot commands do, instead of steady-state scans (counter files kept open, listings and settings read again only when inotify says they changed, and at least every 60 scans); for comparison and debugging")
	f.BoolVar(&a.Demand, "demand", false, "also measure every cgroup's CPU demand and serve its fair share (cgwarden_*_cpu_fair_cores); reads every thread's schedstat at each scan, the largest cost of a scan on a busy node")
	f.StringVar(&a.TrustSizes, "trust-size-annotations", "", "believe the "+vmsize.AnnotationCPU+" annotation of pods in these `NAMESPACES` (comma-separated, or * for all); without it, or beyond it, the annotation counts only while the size policy (ValidatingAdmissionPolicy and binding "+sizetrust.PolicyName+", deploy/kustomize/size-policy) is installed (watched through the API server). VM objects count always; every size is capped at the Node's allocatable CPU. A --pods file is the operator's own input: its sizes are believed, uncapped, as fix believes them")
	f.StringVar(&a.MaxSize, "max-size", "", maxSizeUsage+". A --pods file is not bounded (the operator's own input)")
	f.StringSliceVar(&a.Fix, "fix", nil, "keep these rules fixed while serving (comma-separated: "+strings.Join(plan.Rules, ", ")+"; default none: observe only)")
	f.BoolVar(&a.KeepEmptySource, "keep-empty-source", false, "with --fix="+rules.MisplacedContainer+" on a cgroup v2 node, leave the runtime's cgroup in place once its container's processes are adopted (by default it is removed there, as fix --remove-empty-source does: runc answers containerd's process list from that cgroup, and containerd at its restart drops a task whose list is empty, after which the kubelet starts the container again beside its running processes; with the cgroup gone, the list fails and containerd 2.3.4 and later keep the task. Earlier containerd drops it either way: use prevention, components/nri, there). Removing a cgroup at the hierarchy's root needs CAP_DAC_OVERRIDE; without it the step is noted and the cgroup stays. Cgroup v1 nodes keep it: runc answers from the devices hierarchy, which adoption leaves alone")
	f.StringVar(&a.JournalDir, "journal-dir", journal.DefaultDir, "where the journal of applied changes (and its lock) lives")
	f.StringVar(&a.MaxTierCPU, "max-tier-cpu", "", "cap on the CPU sizes the BestEffort tier's weight counts (a CPU quantity; default: the node's CPUs)")
	f.Var(&so.check, "size-check", "how often pod sizes are looked at for changes between scans (with --fix; by default: with pod metadata from the Kubernetes API, when its informers say a pod, a VM object, the size policy or the Node changed, on no timer; with a pods or VMs file, every 250ms; with pod metadata from the CRI, whose sizes change only with new pods, which the holder sees at once from their cgroups, or with none, only at each scan, every --interval)")
	f.Lookup("size-check").DefValue = "" // 0 is "by the pod source", said above
	addVMs(f, o)
}

// agentOptions are the agent's options from the flags and the global
// ones.
func (so *serveOptions) agentOptions(o *Options) *agent.Options {
	a := so.Options
	a.Interval, a.SizeCheck = time.Duration(so.interval), time.Duration(so.check)
	a.HostRoot, a.PodsFile, a.VMsFile, a.Snapshot = o.HostRoot, o.PodsFile, o.VMsFile, o.Snapshot
	a.Feed = func(ctx context.Context, srv *serve.Server, lister metadata.Lister) error {
		return feedSnapshot(ctx, srv, o.Snapshot, lister, o.VMsFile)
	}
	if a.Log == nil {
		a.Log = slog.Default()
	}
	a.Pod = answerproof.Pod{Namespace: os.Getenv("POD_NAMESPACE"), Name: os.Getenv("POD_NAME"), UID: os.Getenv("POD_UID"), ServiceAccount: os.Getenv("POD_SERVICE_ACCOUNT")}
	return &a
}

// runServe runs the agent until SIGTERM or SIGINT: Options → Config →
// Complete → Run (package agent).
func runServe(ctx context.Context, o *Options, so *serveOptions) error {
	ao := so.agentOptions(o)
	cfg, err := ao.Config()
	if err != nil {
		return err
	}
	cfg.WrapTransport = watchAPI(cfg.Log)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	a, err := cfg.Complete(ctx)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// watchAPI makes every API client of serve report to one apiconn.Reach,
// which logs once when the API server stops answering and once when it
// answers again, and routes client-go's own log lines (klog: reflector
// and Event retries) into serve's log, folded, and dropped while the API
// server is away — an outage is then two lines, not one per retry.
func watchAPI(log *slog.Logger) func(http.RoundTripper) http.RoundTripper {
	reach := apiconn.NewReach(log, time.Now)
	apiconn.RouteKlog(log, reach)
	return reach.Wrap
}

// feedSnapshot serves a snapshot: its samples are fed in order, so a
// two-sample snapshot gives rates; nothing is rescanned afterwards. The
// VMs file's sizes (--vms) are tied to the pods, as audit does.
func feedSnapshot(ctx context.Context, srv *serve.Server, name string, lister metadata.Lister, vmsFile string) error {
	snap, err := LoadSnapshot(name)
	if err != nil {
		return err
	}
	if w := SnapshotWarning(name, snap); w != "" {
		slog.Warn(w)
	}
	var meta *metadata.Set
	if lister != nil {
		pods, err := lister.Pods(ctx)
		if err != nil {
			slog.Warn("pod metadata unavailable; serving pods by UID", "err", err)
		} else {
			meta = metadata.NewSet(pods)
			// A pods file is believed as every command believes it.
			if _, file := lister.(*podsource.FileSource); file {
				t, _ := podsource.Vouched(podsource.File)
				meta.SetTrust(t)
			}
		}
	}
	if err := applyVMsFile(meta, vmsFile); err != nil {
		return err
	}
	if err := srv.FeedSamples(snap.Samples, meta); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}
