package cli

import (
	"fmt"
	"log/slog"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/apiconn"
	"github.com/cgwarden/cgwarden/internal/events"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/nriplugin"
	"github.com/cgwarden/cgwarden/internal/serve"
)

// nriFlags are `cgwarden nri`'s flags besides nriplugin.Options.
type nriFlags struct {
	events     bool
	kubeconfig string
	nodeName   string
}

func newNRI() *cobra.Command {
	o := nriplugin.Options{Socket: nriplugin.DefaultSocket, LearnedFile: filepath.Join(journal.DefaultDir, nriplugin.LearnedFile),
		Listen: "127.0.0.1:9103", Name: "cgwarden", Index: "50", Retry: 5 * time.Second}
	var f nriFlags
	cmd := &cobra.Command{
		Use:   "nri",
		Short: "Prevent misplacement: an NRI plugin that names listed runtimes' container cgroups where the kubelet expects them, before they are created",
		Long: `nri registers cgwarden as an NRI (Node Resource Interface) plugin with the container runtime
(containerd ≥ 1.7, on by default in 2.x; CRI-O ≥ 1.26). Before each container of a pod whose runtime
handler is listed (--runtime-handlers, and those in --learned-file) is created, it sets the
container's linux.cgroupsPath to the absolute cgroupfs path the kubelet's layout gives it (the pod's
cgroup, then the container's name), so a runtime that takes the systemd form slice:prefix:name as a
literal directory (the runwasi/Spin shim before its 2025 fix) creates it under its pod from the start.
Containers of other handlers are never touched. A container it cannot place is logged, counted and
let through, never refused. See docs/nri.md.`,
		Example: `  cgwarden nri --runtime-handlers wasmtime-spin-v2 --dry-run
  cgwarden nri --runtime-handlers spin,slight --socket /var/run/nri/nri.sock --events`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runNRI(cmd, o, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Socket, "socket", o.Socket, "the runtime's NRI socket")
	fl.StringSliceVar(&o.Handlers, "runtime-handlers", nil, "runtime handlers (RuntimeClass handlers) whose containers are placed, comma-separated")
	fl.StringVar(&o.LearnedFile, "learned-file", o.LearnedFile, "a `FILE` of more handlers, one a line, that the agent learned misplace containers (read again when it changes; \"\" for none)")
	fl.BoolVar(&o.DefaultHandler, "default-handler", false, "place the containers of pods that name no runtime handler too (the runtime's default): only where the default runtime itself takes systemd's slice:prefix:id literally (k3s --default-runtime set to such a shim); runc and crun would refuse the path")
	fl.BoolVar(&o.DryRun, "dry-run", false, "log and count what would be set, set nothing")
	fl.StringVar(&o.Listen, "listen", o.Listen, "serve /metrics and /healthz on this `ADDR` (\"\" for none)")
	fl.StringVar(&o.Index, "plugin-index", o.Index, "the plugin's NRI index (two digits; the runtime calls plugins in index order)")
	fl.DurationVar(&o.Retry, "retry", o.Retry, "wait this long before connecting again when the runtime is away")
	fl.StringVar(&o.LockDir, "lock-dir", "", "register with the runtime only while holding a flock on this `DIR` (read-only is enough), so that a second plugin on the node, as in a DaemonSet update with maxSurge, waits instead of registering beside this one (\"\" for none)")
	fl.BoolVar(&f.events, "events", false, "raise an Event on the pod for each container placed (needs --kubeconfig or in-cluster)")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for --events (default: in-cluster config)")
	fl.StringVar(&f.nodeName, "node-name", "", "this node's name, the Events' source (default: $NODE_NAME, else the hostname)")
	return cmd
}

// runNRI runs the plugin until SIGTERM or SIGINT.
func runNRI(cmd *cobra.Command, o nriplugin.Options, f nriFlags) error {
	if err := o.Validate(); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	log := slog.Default().With("component", "nri")
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Events go through the API server: an outage is logged once, as in
	// serve (apiconn).
	reach := apiconn.NewReach(log, time.Now)
	var notifier nriplugin.Notifier
	if f.events {
		rc, err := apiconn.RESTConfig(f.kubeconfig, reach.Wrap)
		if err != nil {
			return fmt.Errorf("--events needs the API server (--kubeconfig, or in-cluster): %w", err)
		}
		note, stopEvents, err := events.New(rc, serve.NodeName(f.nodeName), log)
		if err != nil {
			return err
		}
		defer stopEvents()
		notifier = note
	}
	return nriplugin.Run(ctx, o, notifier, log)
}
