package deploytest

import (
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The agent's DaemonSet updates with no gap: maxSurge 10% (rounded up: at
// least one node) and maxUnavailable 0 start the new pod beside the old
// one on each node, a tenth of the fleet at a time
// (docs/deploy.md, "Updates"). That only works when no container of the
// host-network pod declares a port: the API server defaults a
// hostNetwork pod's hostPort to its containerPort
// (pkg/apis/core/v1/defaults.go, defaultHostNetworkPorts), and the
// scheduler's NodePorts filter refuses a node where another pod holds
// that hostPort, so the new pod would stay Pending beside the old one and
// the rollout would never end. The Service then reaches the agent by
// port number, the one --listen names. Every configuration, kustomize
// and chart alike.
func TestDaemonSetUpdatesWithoutAGap(t *testing.T) {
	want := map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxSurge": "10%", "maxUnavailable": float64(0)}}
	for _, cfg := range configurations(t) {
		var listen int
		for _, o := range cfg.objs {
			if o["kind"] != "DaemonSet" {
				continue
			}
			spec := o["spec"].(map[string]any)
			if got := spec["updateStrategy"]; !reflect.DeepEqual(got, want) {
				t.Errorf("%s, %s: updateStrategy %v, want %v", cfg.name, o.key(), got, want)
			}
			pod := spec["template"].(map[string]any)["spec"].(map[string]any)
			if pod["hostNetwork"] != true {
				t.Errorf("%s, %s: not on the host's network; this test's reasons no longer hold", cfg.name, o.key())
			}
			for _, c := range containers(pod) {
				if ports, ok := c["ports"]; ok {
					t.Errorf("%s, %s: container %s declares ports %v: on the host's network each is a hostPort, which keeps a surge pod off its node", cfg.name, o.key(), c["name"], ports)
				}
			}
			listen = listenPort(t, containers(pod)[0])
			// An update that changes the agent's user (observe-only to
			// fix mode) waits for the old agent instead of crash-looping.
			if !slices.Contains(strs(containers(pod)[0]["args"]), "--listen-wait=2m") {
				t.Errorf("%s, %s: the agent lacks --listen-wait=2m", cfg.name, o.key())
			}
			for _, p := range []string{"readinessProbe", "livenessProbe"} {
				probe, _ := containers(pod)[0][p].(map[string]any)
				get, _ := probe["httpGet"].(map[string]any)
				if port, _ := get["port"].(float64); int(port) != listen {
					t.Errorf("%s, %s: %s port %v, want --listen's %d by number", cfg.name, o.key(), p, get["port"], listen)
				}
			}
		}
		for _, o := range cfg.objs {
			if o["kind"] != "Service" || o.key() != "Service/cgwarden-system/cgwarden" {
				continue
			}
			for _, p := range o["spec"].(map[string]any)["ports"].([]any) {
				target := p.(map[string]any)["targetPort"]
				if n, ok := target.(float64); !ok || int(n) != listen {
					t.Errorf("%s, %s: targetPort %v, want --listen's port %d by number (no container port names it)", cfg.name, o.key(), target, listen)
				}
			}
		}
	}
}

// listenPort is the port of an agent container's --listen.
func listenPort(t *testing.T, c map[string]any) int {
	t.Helper()
	for _, a := range strs(c["args"]) {
		if v, ok := strings.CutPrefix(a, "--listen="); ok {
			_, port, err := net.SplitHostPort(v)
			if err != nil {
				t.Fatalf("%s: %v", a, err)
			}
			n, err := strconv.Atoi(port)
			if err != nil {
				t.Fatalf("%s: %v", a, err)
			}
			return n
		}
	}
	t.Fatalf("container %s has no --listen", c["name"])
	return 0
}
