package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// failpointImage is the agent built with -tags failpoints; only the lane
// makes it (internal/failpoint TestDefaultBuildHasNoFailpoints keeps the
// shipped build free of failpoints).
const failpointImage = "cgwarden.local/cgwarden:failpoints"

// livenessIntervals is the agent's rule: /healthz fails once its scan
// loop has completed no scan for 3 intervals (internal/serve/health.go).
const livenessIntervals = 3

// restartSlack is what the bound allows beyond the probe's and the grace
// period's arithmetic: the kubelet's restart of the container (sync loop,
// runc) and the whole seconds of its startedAt, on a loaded machine.
const restartSlack = 15 * time.Second

// agentStopWait is internal/agentStopWait: how long the agent's
// shutdown waits for a stuck loop before it exits without it. (Not
// imported: internal/agent would bring NRI, wazero and Prometheus into
// this module's build for one constant; the check of the stalled
// container's log below fails if the agent stops saying it.)
const agentStopWait = 5 * time.Second

// TestStalledScanLoopRestarted: the agent as shipped (observe-only; the
// base's probes, interval and grace period) from the failpoints image,
// its scan loop stalled for 10 minutes at its third scan
// (CGWARDEN_FAILPOINTS loop/scan=stall=10m@3, testdata/agent-stall). Its
// /healthz turns 503 once no scan has completed for 3 intervals, the
// kubelet's liveness probe fails (an Unhealthy Event), kills it (a Killing
// Event) and restarts it: the new container starts within the bound the
// shipped manifest's settings give, 3 intervals + failureThreshold ×
// periodSeconds + timeoutSeconds + agentStopWait (the shutdown waits
// that long for the stalled loop, then the agent exits by itself, before
// the grace period's SIGKILL) + restartSlack.
func TestStalledScanLoopRestarted(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	importImage(t, failpointImage, "failpoints")
	e.installAgent(t, "testdata/agent-stall")
	pod, spec := e.agentPod(t)
	c := spec.Containers[0]
	if c.Image != failpointImage {
		t.Fatalf("the agent runs %s, want %s", c.Image, failpointImage)
	}
	interval := 10 * time.Second // serve.DefaultInterval; the base sets none
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--interval="); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatal(err)
			}
			interval = d
		}
	}
	lp := c.LivenessProbe
	if lp == nil {
		t.Fatal("the shipped agent has no liveness probe")
	}
	grace := int64(30)
	if spec.TerminationGracePeriodSeconds != nil {
		grace = *spec.TerminationGracePeriodSeconds
	}
	if lp.TerminationGracePeriodSeconds != nil {
		grace = *lp.TerminationGracePeriodSeconds
	}
	// The stalled agent exits by itself agentStopWait after the
	// kubelet's SIGTERM, not at its SIGKILL a grace period later.
	exitWait := min(time.Duration(grace)*time.Second, agentStopWait)
	bound := livenessIntervals*interval + time.Duration(lp.FailureThreshold*lp.PeriodSeconds+lp.TimeoutSeconds)*time.Second +
		exitWait + restartSlack
	t.Logf("interval %v; liveness period %ds, failureThreshold %d, timeout %ds; grace %ds, the agent's own exit %v after SIGTERM: restart within %v of the stall",
		interval, lp.PeriodSeconds, lp.FailureThreshold, lp.TimeoutSeconds, grace, exitWait, bound)
	if len(pod.Status.ContainerStatuses) != 1 || pod.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("the agent restarted before the stall: %+v", pod.Status.ContainerStatuses)
	}

	// The stall, as the agent's own stderr timestamps it.
	var stallAt time.Time
	poll.Until(t, 4*interval+30*time.Second, "the agent's scan loop stalled", func() (bool, string, error) {
		logs, err := runKubectl(e, "logs", "-n", "cgwarden-system", pod.Name, "-c", c.Name, "--timestamps")
		if err != nil {
			return false, logs, nil
		}
		for _, l := range strings.Split(logs, "\n") {
			ts, msg, _ := strings.Cut(l, " ")
			if strings.HasPrefix(msg, "cgwarden failpoint loop/scan: stall") {
				stallAt, err = time.Parse(time.RFC3339Nano, ts)
				return err == nil, l, err
			}
		}
		return false, tail(logs, 3), nil
	})
	t.Logf("scan loop stalled at %s", stallAt.Format(time.RFC3339Nano))

	// /healthz: ok, then 503 from 3 intervals after the stall.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var unhealthyAt time.Time
	poll.Until(t, livenessIntervals*interval+30*time.Second, "/healthz failing", func() (bool, string, error) {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", lp.HTTPGet.Port.IntValue()))
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			unhealthyAt = time.Now()
			return true, "", nil
		}
		return false, resp.Status, nil
	})
	// The rule counts from the last completed scan, which ended at most
	// one interval before the stalled one began: 503 comes 2 to 3
	// intervals after the stall (a second of leeway for the runtime's
	// log timestamp and the probing).
	after := unhealthyAt.Sub(stallAt)
	t.Logf("/healthz 503 %v after the stall", after.Round(100*time.Millisecond))
	if lo := (livenessIntervals-1)*interval - time.Second; after < lo {
		t.Errorf("/healthz failed %v after the stall, before %d intervals without a completed scan (at least %v after it)", after, livenessIntervals, lo)
	}

	// The kubelet restarts the container.
	var restarted *corev1.ContainerStatus
	poll.Until(t, bound+30*time.Second-time.Since(stallAt), "the kubelet restarting the agent", func() (bool, string, error) {
		p, err := e.cs.CoreV1().Pods("cgwarden-system").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		cs := p.Status.ContainerStatuses
		if len(cs) == 1 && cs[0].RestartCount >= 1 && cs[0].State.Running != nil {
			restarted = &cs[0]
			return true, "", nil
		}
		return false, describe(p), nil
	})
	startedAt := restarted.State.Running.StartedAt.Time
	took := startedAt.Sub(stallAt)
	last := ""
	term := restarted.LastTerminationState.Terminated
	switch {
	case term == nil:
		t.Errorf("the restarted container's last state is not terminated: %+v", restarted.LastTerminationState)
	case term.ExitCode == 128+9:
		// SIGKILL: the stalled loop held the shutdown for the whole
		// grace period.
		t.Errorf("the stalled agent was SIGKILLed (exit %d, %s), want it to exit by itself %v after SIGTERM", term.ExitCode, term.Reason, agentStopWait)
	}
	if prev, err := runKubectl(e, "logs", "-n", "cgwarden-system", pod.Name, "-c", c.Name, "--previous"); err != nil || !strings.Contains(prev, "exiting without it") {
		t.Errorf("the stalled container's log does not say it exited without its stuck loop (%v):\n%s", err, tail(prev, 5))
	}
	if term != nil {
		last = fmt.Sprintf("; the stalled container ended %v after the stall, exit %d (%s)",
			term.FinishedAt.Sub(stallAt).Round(time.Second), term.ExitCode, term.Reason)
	}
	t.Logf("restartCount %d; the new container started %v after the stall (bound %v)%s", restarted.RestartCount, took.Round(time.Second), bound, last)
	if took > bound {
		t.Errorf("the agent was restarted %v after its scan loop stalled, want within %v", took, bound)
	}
	evs, err := e.cs.CoreV1().Events("cgwarden-system").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
	if err != nil {
		t.Fatal(err)
	}
	var unhealthy, killing bool
	for _, ev := range evs.Items {
		switch {
		case ev.Reason == "Unhealthy" && strings.HasPrefix(ev.Message, "Liveness probe failed") && strings.Contains(ev.Message, "503"):
			unhealthy = true
			t.Logf("Event %s: %s", ev.Reason, ev.Message)
		case ev.Reason == "Killing" && strings.Contains(ev.Message, "failed liveness probe"):
			killing = true
			t.Logf("Event %s: %s", ev.Reason, ev.Message)
		}
	}
	if !unhealthy || !killing {
		t.Errorf("Events of the agent's pod: liveness failure %v, kill for it %v; want both", unhealthy, killing)
	}
}
