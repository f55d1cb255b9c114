package nriplugin

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/containerd/nri/pkg/api"
)

// Notifier raises Events on pods; events.Notifier is one.
type Notifier interface {
	Pod(namespace, name, uid, reason, message string)
}

// Plugin handles the runtime's NRI requests (the stub calls it).
type Plugin struct {
	listed  func(handler string) bool
	dryRun  bool
	log     *slog.Logger
	metrics *Metrics
	events  Notifier // nil: none

	mu      sync.Mutex
	runtime string // layout's name of the runtime, from Configure
}

// NewPlugin places the containers of the pods whose runtime handler is
// listed (Handlers.Listed). events may be nil.
func NewPlugin(listed func(handler string) bool, dryRun bool, m *Metrics, events Notifier, log *slog.Logger) *Plugin {
	if log == nil {
		log = slog.Default()
	}
	return &Plugin{listed: listed, dryRun: dryRun, metrics: m, events: events, log: log}
}

// Configure learns which runtime it serves: the container cgroup's name
// depends on it (crio-<id> under CRI-O). Subscribing to nothing (0) lets
// the stub subscribe to the requests the plugin handles: CreateContainer.
func (p *Plugin) Configure(_ context.Context, _, runtime, version string) (api.EventMask, error) {
	p.mu.Lock()
	p.runtime = layout.RuntimeOfNRI(runtime)
	p.mu.Unlock()
	if layout.RuntimeOfNRI(runtime) == "" {
		p.log.Warn("unknown runtime: container cgroups named as containerd names them under cgroupfs", "runtime", runtime, "version", version)
	}
	p.log.Info("registered with the runtime", "runtime", runtime, "version", version, "dryRun", p.dryRun)
	return 0, nil
}

// CreateContainer places a listed handler's container. It never returns an
// error: NRI would fail the container's creation.
func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (adj *api.ContainerAdjustment, _ []*api.ContainerUpdate, _ error) {
	p.metrics.Requests.Inc()
	defer func() {
		if r := recover(); r != nil {
			adj = nil
			p.metrics.Failures.WithLabelValues(FailPanic).Inc()
			p.log.Error("placing a container panicked: let through unplaced", "pod", podName(pod), "container", ctr.GetName(), "panic", fmt.Sprint(r))
		}
	}()
	p.mu.Lock()
	runtime := p.runtime
	p.mu.Unlock()
	d := Decide(p.listed, runtime, pod, ctr)
	return p.act(pod, ctr, d), nil, nil
}

// act logs, counts and reports a decision, and returns its adjustment (nil
// when nothing is set).
func (p *Plugin) act(pod *api.PodSandbox, ctr *api.Container, d Decision) *api.ContainerAdjustment {
	log := p.log.With("pod", podName(pod), "container", ctr.GetName(), "id", layout.ShortID(ctr.GetId()), "handler", d.Handler)
	switch {
	case d.Err != nil:
		p.metrics.Containers.WithLabelValues(d.Handler, ResultFailed).Inc()
		p.metrics.Failures.WithLabelValues(FailPlace).Inc()
		log.Warn("cannot place the container: let through unplaced (repair catches it if the runtime misplaces it)", "err", d.Err)
		return nil
	case !d.Place:
		return nil
	case p.dryRun:
		p.metrics.Containers.WithLabelValues(d.Handler, ResultWouldPlace).Inc()
		log.Info("dry run: would set cgroupsPath", "from", d.From, "to", d.To, "changes", d.Changed())
		if d.Changed() {
			p.event(pod, "CgwardenWouldPlaceContainer", fmt.Sprintf("dry run: container %s (runtime handler %s) would get cgroupsPath %s instead of %s, where the kubelet's layout puts it", ctr.GetName(), d.Handler, d.To, d.From))
		}
		return nil
	case !d.Changed():
		p.metrics.Containers.WithLabelValues(d.Handler, ResultAlreadyRight).Inc()
		log.Debug("cgroupsPath already the kubelet's layout's: set as it is", "path", d.To)
		return d.Adjustment()
	}
	p.metrics.Containers.WithLabelValues(d.Handler, ResultPlaced).Inc()
	log.Info("cgroupsPath set where the kubelet's layout puts the container", "from", d.From, "to", d.To)
	p.event(pod, "CgwardenContainerPlaced", fmt.Sprintf("container %s (runtime handler %s) created in cgroup %s, where the kubelet's layout puts it, instead of %s", ctr.GetName(), d.Handler, d.To, d.From))
	return d.Adjustment()
}

// event raises an Event on the pod; the recorder queues it, so creation
// never waits for the API server.
func (p *Plugin) event(pod *api.PodSandbox, reason, msg string) {
	if p.events == nil || pod.GetName() == "" {
		return
	}
	p.events.Pod(pod.GetNamespace(), pod.GetName(), pod.GetUid(), reason, msg)
}

func podName(pod *api.PodSandbox) string { return pod.GetNamespace() + "/" + pod.GetName() }
