package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// TestSizePolicyCoversEveryPodWrite: the size policy refuses the
// cgwarden.io/cpu annotation on every write that can put it on a pod, not
// on create and update alone (issue 38, item 5). The API server's pod
// subresources keep or drop metadata each in its own way: a status write
// (pods/status, the kubelet's and controllers') keeps the annotations it
// is sent, and a Binding (pods/binding, the scheduler's) copies its own
// annotations onto the pod. Each write is made by an identity that RBAC
// lets do anything (system:masters), so a refusal is the policy's; a write
// passes the test if the policy refuses it or if the API server leaves
// the annotation off the pod.
func TestSizePolicyCoversEveryPodWrite(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	e.installSizePolicy(t)
	ns := e.namespace(t)
	writer := e.clientAs(t, "system:serviceaccount:"+ns+":writer", "system:masters", "system:authenticated")
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	poll.Until(t, 60*time.Second, "the size policy enforced", func() (bool, string, error) {
		_, err := writer.CoreV1().Pods(ns).Create(ctx, bestEffort("buys-cpu", map[string]string{"cgwarden.io/cpu": "64"}, nil), dry)
		return err != nil, "admitted", nil
	})

	const patch = `{"metadata":{"annotations":{"cgwarden.io/cpu":"64"}}}`
	refusedOrDropped := func(what string, p *corev1.Pod, err error) {
		t.Helper()
		switch {
		case err != nil && strings.Contains(err.Error(), "cgwarden-size-annotation"):
			t.Logf("%s: refused by the policy", what)
		case err != nil:
			t.Errorf("%s: refused, but not by the size policy: %v", what, err)
		case p.Annotations["cgwarden.io/cpu"] != "":
			t.Errorf("%s: admitted, and the pod would carry cgwarden.io/cpu=%s", what, p.Annotations["cgwarden.io/cpu"])
		default:
			t.Logf("%s: admitted, the API server leaves the annotation off", what)
		}
	}

	// A running pod: its status, its resources, its ephemeral containers.
	running, err := e.cs.CoreV1().Pods(ns).Create(ctx, bestEffort("running", nil, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 120*time.Second, "pod running", func() (bool, string, error) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, running.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, "", err
	})
	patchDry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	for _, sub := range []string{"status", "resize", "ephemeralcontainers"} {
		p, err := writer.CoreV1().Pods(ns).Patch(ctx, running.Name, types.MergePatchType, []byte(patch), patchDry, sub)
		refusedOrDropped("a patch of pods/"+sub, p, err)
	}

	// A pod no scheduler takes (schedulerName names none), bound by hand
	// with the annotation on the Binding, as a scheduler binds.
	pending := bestEffort("pending", nil, nil)
	pending.Spec.SchedulerName = "cgwarden-test-no-scheduler"
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pending, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pending.Name, Annotations: map[string]string{"cgwarden.io/cpu": "64"}},
		Target: corev1.ObjectReference{Kind: "Node", Name: e.node}}
	berr := writer.CoreV1().Pods(ns).Bind(ctx, b, metav1.CreateOptions{})
	p, err := e.cs.CoreV1().Pods(ns).Get(ctx, pending.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refusedOrDropped(fmt.Sprintf("a Binding (pods/binding) to %s", e.node), p, berr)

	// The policy's own checks hold on those writes: the sizer's identity
	// may still write the annotation through the status (its RBAC aside).
	sizer := e.clientAs(t, sizerUser, "system:masters", "system:authenticated")
	if _, err := sizer.CoreV1().Pods(ns).Patch(ctx, running.Name, types.MergePatchType, []byte(patch), patchDry, "status"); err != nil {
		t.Errorf("the sizer's identity refused a status write with the annotation: %v", err)
	}
	// A status write that leaves the annotation alone is admitted (the
	// kubelet writes status all the time).
	st, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{"type": "cgwarden.io/test", "status": "True"}}}})
	if _, err := writer.CoreV1().Pods(ns).Patch(ctx, running.Name, types.StrategicMergePatchType, st, patchDry, "status"); err != nil {
		t.Errorf("a status write without the annotation refused: %v", err)
	}
}
