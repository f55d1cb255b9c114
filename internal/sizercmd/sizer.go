package sizercmd

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/buildinfo"
	"github.com/cgwarden/cgwarden/internal/cliflag"
	"github.com/cgwarden/cgwarden/internal/sizer"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// Duration is cgwarden's bounded duration flag.
type Duration = cliflag.Duration

// Main runs cgwarden-sizer with args and returns the process exit code:
// 0, or 2 with the error on stderr.
func Main(args []string) int {
	root := NewCommand(os.Stdout, os.Stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		root.PrintErrln("cgwarden-sizer:", err)
		return 2
	}
	return 0
}

// NewCommand builds cgwarden-sizer's command: the sizer's flags and
// --log-level (what `cgwarden sizer` took before it was its own binary).
func NewCommand(stdout, stderr io.Writer) *cobra.Command {
	cmd := newSizer()
	var level string
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.Version = buildinfo.Get().String()
	cmd.SetVersionTemplate("cgwarden-sizer {{.Version}}\n")
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.Flags().StringVar(&level, "log-level", "info", "log level: debug, info, warn or error")
	cmd.PreRunE = func(*cobra.Command, []string) error {
		lvl, err := cliflag.ParseLogLevel(level)
		if err != nil {
			return err
		}
		slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})))
		return nil
	}
	return cmd
}

func newSizer() *cobra.Command {
	o := sizer.Options{
		Listen: ":9443", CASecret: "cgwarden-sizer-ca",
		Controller: true, LeaderElect: true, LeaderElectionID: "cgwarden-sizer",
		LeaseDuration: sizer.DefaultLeaseDuration, RenewDeadline: sizer.DefaultRenewDeadline, RetryPeriod: sizer.DefaultRetryPeriod,
		Workers: 8, QPS: 100, Burst: 200, WebhookQPS: 20, WebhookBurst: 40,
	}
	coalesce, recheck := Duration(time.Second), Duration(time.Minute)
	o.PodLevel = sizer.PodLevelAuto
	cmd := &cobra.Command{
		Use:   "cgwarden-sizer",
		Short: "Give VM pods CPU requests equal to their VM's size at admission, and keep them equal to its live size by in-place resize",
		Long: `cgwarden-sizer is a mutating admission webhook and a resize controller for pods that run a virtual machine.

At admission (POST /mutate) a pod without any CPU request that runs a NeonVM VM (owned by a
vm.neon.tech VirtualMachine, or labelled vm.neon.tech/name) gets requests.cpu on its neonvm-runner
container equal to the VM's spec.guest.cpus.use; a pod annotated cgwarden.io/cpu gets that value
(on its only container, or the one cgwarden.io/cpu-container names). Limits are never set. The pod is
then Burstable and the kubelet weighs it by its size. KubeVirt's virt-launcher pods are left alone. A
pod that cannot be sized is admitted unchanged with a warning. See docs/sizing.md.

--pod-level (auto, on or off) says where a NeonVM runner pod's request goes: on the pod itself
(spec.resources.requests.cpu, pod-level resources) or on its neonvm-runner container. It is decided once
at start and logged. auto puts it on the pod when the API server is 1.36 or later (where the feature gates
PodLevelResources and InPlacePodLevelResourcesVerticalScaling are on by default) and every node's kubelet
declares InPlacePodLevelResourcesVerticalScaling in its status.declaredFeatures; else on the container.
Use on or off where a cluster's feature gates differ from their defaults. Whatever it says, the resize
controller resizes a pod where its request is: at pod level if the pod has a pod-level CPU request.

The resize controller (one replica, by leader election) watches vm.neon.tech/v1 virtualmachines and
patches each running runner pod's resize subresource when the VM's use changes, bounded by its node's
allocatable CPU and by its namespace's --max-size bound (which holds at admission too); without the CRD
it idles and looks again every --crd-recheck. A VM is resized --coalesce after its last change (a
trailing debounce, at most --max-delay after the first change of a burst), to its size then, with one
PATCH; --workers VMs at a time within --kube-api-qps. At most one Event per pod and reason per
--event-window; the rest are counted on /metrics. The Lease's timings are kube-controller-manager's
flags and defaults (--leader-elect-lease-duration 15s, --leader-elect-renew-deadline 10s,
--leader-elect-retry-period 2s), checked at start.

Without --tls-cert-file it signs its own serving certificate with the CA in Secret --ca-secret, made
at install (cgwarden-sizer ca, or the Helm chart) together with the webhook configuration's caBundle.
It only reads that Secret, and never reads or writes its webhook configuration.`,
		Example: `  cgwarden-sizer --namespace cgwarden --cert-hosts cgwarden-sizer.cgwarden.svc
  cgwarden-sizer --kubeconfig admin.kubeconfig --listen 127.0.0.1:9443 --namespace sizer --cert-hosts 127.0.0.1 --leader-elect=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSizer(cmd, &o, coalesce, recheck) },
	}
	sizerFlags(cmd, &o, &coalesce, &recheck)
	cmd.AddCommand(newCA())
	return cmd
}

// runSizer checks the options and runs the sizer until SIGTERM or SIGINT.
func runSizer(cmd *cobra.Command, o *sizer.Options, coalesce, recheck Duration) error {
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return fmt.Errorf("--tls-cert-file and --tls-private-key-file go together")
	}
	if o.Namespace == "" {
		o.Namespace = os.Getenv("POD_NAMESPACE")
	}
	if o.TLSCertFile == "" && (o.Namespace == "" || len(o.CertHosts) == 0) {
		return fmt.Errorf("managed certificates need --namespace (or POD_NAMESPACE) and --cert-hosts; or give --tls-cert-file and --tls-private-key-file")
	}
	if o.LeaderElect && o.Namespace == "" {
		return fmt.Errorf("--leader-elect needs --namespace (or POD_NAMESPACE) for its Lease")
	}
	if o.LeaderElect && o.Controller {
		if err := sizer.CheckLeaderElection(o.LeaseDuration, o.RenewDeadline, o.RetryPeriod); err != nil {
			return err
		}
	}
	if coalesce <= 0 || recheck <= 0 {
		return fmt.Errorf("--coalesce and --crd-recheck must be above 0")
	}
	if o.Workers < 1 || o.QPS <= 0 || o.Burst < 1 || o.WebhookQPS <= 0 || o.WebhookBurst < 1 || o.MinStep < 0 || o.MaxDelay < 0 || o.EventWindow < 0 {
		return fmt.Errorf("--workers, --kube-api-qps, --kube-api-burst, --webhook-qps and --webhook-burst must be above 0; --min-step, --max-delay and --event-window not below 0")
	}
	o.Coalesce, o.CRDRecheck = time.Duration(coalesce), time.Duration(recheck)
	o.Log = slog.Default()
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return sizer.Run(ctx, *o)
}

// parsedFlag is a flag value that parse reads, shown as fmt prints it:
// --pod-level (sizer.ParsePodLevelMode) and --max-size, parsed as the
// agent parses it (vmsize.ParseMaxSizes: an error names the entry and why).
type parsedFlag[T any] struct {
	p     *T
	parse func(string) (T, error)
	typ   string
}

func (f parsedFlag[T]) String() string {
	if f.p == nil {
		return ""
	}
	return fmt.Sprint(*f.p)
}

func (f parsedFlag[T]) Set(s string) error {
	v, err := f.parse(s)
	if err != nil {
		return err
	}
	*f.p = v
	return nil
}

func (f parsedFlag[T]) Type() string { return f.typ }

// sizerFlags binds the sizer's flags to o.
func sizerFlags(cmd *cobra.Command, o *sizer.Options, coalesce, recheck *Duration) {
	f := cmd.Flags()
	f.StringVar(&o.Listen, "listen", o.Listen, "the webhook's HTTPS `ADDRESS` (also /healthz and /metrics)")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig `FILE` (default: in-cluster configuration)")
	f.StringVar(&o.TLSCertFile, "tls-cert-file", "", "serving certificate `FILE` managed elsewhere (cert-manager); re-read on each handshake")
	f.StringVar(&o.TLSKeyFile, "tls-private-key-file", "", "its key `FILE`")
	f.StringVar(&o.Namespace, "namespace", "", "the `NAMESPACE` of the certificate Secret and the leader election Lease (default: $POD_NAMESPACE)")
	f.StringVar(&o.CASecret, "ca-secret", o.CASecret, "the Secret `NAME` that keeps the CA made at install (cgwarden-sizer ca), which signs the serving certificate; only read")
	f.StringSliceVar(&o.CertHosts, "cert-hosts", nil, "DNS names and IPs the serving certificate is for (the Service's names; 127.0.0.1 for a url: webhook)")
	f.BoolVar(&o.Controller, "resize", o.Controller, "run the resize controller")
	f.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "run the resize controller only in the replica holding the Lease")
	f.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "the leader election Lease `NAME`")
	f.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "how long a replica waits, after the leader's last renewal, before it takes the Lease (as kube-controller-manager's flag): a leader that dies leaves the resize controller stopped this long, and up to one --leader-elect-retry-period more; longer than --leader-elect-renew-deadline")
	f.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "how long the leader keeps trying to renew its Lease before it stops leading (and the sizer exits, to be restarted); longer than 1.2 × --leader-elect-retry-period")
	f.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "how often a replica tries to take or renew the Lease")
	f.Var(parsedFlag[vmsize.MaxSizes]{&o.MaxSizes, vmsize.ParseMaxSizes, "BOUNDS"}, "max-size", "bound the CPU request given to each namespace's pods, at admission and at resize; `BOUNDS` are NAMESPACE=CPU[,NAMESPACE=CPU...], NAMESPACE a namespace or * for every namespace not named, CPU a quantity (8, 2500m); a VM's or an annotation's size above its namespace's bound gets the bound, with a warning at admission and the reason in the resize's Event. Give cgwarden serve the same bounds: the agent caps the sizes it believes alike")
	f.Var(coalesce, "coalesce", "a trailing debounce: a VM's pods are resized this long after its last size change")
	f.DurationVar(&o.MaxDelay, "max-delay", 0, "a VM changing without pause is resized at most this long after the first change of a burst (0: 5×--coalesce)")
	f.Int64Var(&o.MinStep, "min-step", 0, "resizes smaller than this many `MILLICPU` are not made (0: every change; a resize to the node's cap always is)")
	f.IntVar(&o.Workers, "workers", o.Workers, "VMs resized at once")
	f.Float32Var(&o.QPS, "kube-api-qps", o.QPS, "API requests per second the resize controller may make (client-go's default is 5)")
	f.IntVar(&o.Burst, "kube-api-burst", o.Burst, "API requests the sizer may make in a burst")
	f.Float32Var(&o.WebhookQPS, "webhook-qps", o.WebhookQPS, "VM lookups per second the webhook may make, a budget apart from --kube-api-qps")
	f.IntVar(&o.WebhookBurst, "webhook-burst", o.WebhookBurst, "VM lookups the webhook may make in a burst")
	f.DurationVar(&o.EventWindow, "event-window", 0, "at most one Event per pod and reason in this window (0: 10 minutes)")
	f.Var(recheck, "crd-recheck", "how often to look for the VirtualMachine CRD while it is absent")
	f.Var(parsedFlag[sizer.PodLevelMode]{&o.PodLevel, sizer.ParsePodLevelMode, "auto|on|off"}, "pod-level", "where a NeonVM runner pod's CPU request goes: on the pod (spec.resources: on), on its container (off), or on the pod where the API server (1.36 or later) and every node's kubelet can resize it there (auto); decided at start and logged")
}
