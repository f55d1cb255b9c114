package podsource

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cgwarden/cgwarden/internal/poll"
)

func apiPod(name, uid, node, ctrID string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app"}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", ContainerID: "containerd://" + ctrID,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Unix(1724260953, 0))}},
		}}},
	}
}

func TestKubernetesInformerOnThisNode(t *testing.T) {
	cs := fake.NewClientset(apiPod("spin-test", spinUID, "node-a", spinCtr))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k, err := NewKubernetes(ctx, cs.CoreV1().Pods(""), "node-a", 10*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := k.Pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].Name != "spin-test" || pods[0].Containers[0].ID != spinCtr || pods[0].Containers[0].Name != "app" {
		t.Fatalf("pods = %+v", pods)
	}
	// The list and watch sent to the API server are limited to the node.
	var listed, watched bool
	for _, a := range cs.Actions() {
		switch act := a.(type) {
		case k8stesting.ListAction:
			listed = true
			if got := act.GetListRestrictions().Fields.String(); got != "spec.nodeName=node-a" {
				t.Errorf("list field selector %q", got)
			}
		case k8stesting.WatchAction:
			watched = true
			if got := act.GetWatchRestrictions().Fields.String(); got != "spec.nodeName=node-a" {
				t.Errorf("watch field selector %q", got)
			}
		}
	}
	if !listed || !watched {
		t.Errorf("listed %v watched %v", listed, watched)
	}
	// A pod scheduled later arrives through the watch.
	if _, err := cs.CoreV1().Pods("default").Create(ctx, apiPod("late", "11111111-2222-3333-4444-555555555555", "node-a", "abc"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Every(20*time.Millisecond).Until(t, 10*time.Second, "the watched pod arriving", func() (bool, string, error) {
		pods, _ := k.Pods(ctx)
		return len(pods) == 2, fmt.Sprintf("%d pods", len(pods)), nil
	})
}

// flakyPods fails to list until up is set, like an API server that is not
// reachable yet.
type flakyPods struct {
	PodWatcher
	up atomic.Bool
}

func (f *flakyPods) List(ctx context.Context, o metav1.ListOptions) (*corev1.PodList, error) {
	if !f.up.Load() {
		return nil, errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
	}
	return f.PodWatcher.List(ctx, o)
}

func TestKubernetesSourceRecoversAfterTimeout(t *testing.T) {
	cs := fake.NewClientset(apiPod("spin-test", spinUID, "node-a", spinCtr))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &flakyPods{PodWatcher: cs.CoreV1().Pods("")}
	k, err := NewKubernetes(ctx, f, "node-a", 300*time.Millisecond, false)
	if !errors.Is(err, ErrNotSynced) || k == nil {
		t.Fatalf("unreachable API: %v, %v", k, err)
	}
	defer k.Close()
	if _, err := k.Pods(ctx); !errors.Is(err, ErrNotSynced) {
		t.Fatalf("Pods before sync: %v", err)
	}
	f.up.Store(true)
	poll.Every(50*time.Millisecond).Until(t, 15*time.Second, "the source recovering", func() (bool, string, error) {
		pods, err := k.Pods(ctx)
		return err == nil && len(pods) == 1, fmt.Sprintf("%v %v", pods, err), nil
	})
}

// TestKubernetesSourceNotifiesChanges: the source's Changes fire when a
// pod's metadata changes, a pod comes or goes (what the weight holder
// reads the sizes on, instead of a timer), and not for a status-only
// update, which leaves Pods' answer as it was.
func TestKubernetesSourceNotifiesChanges(t *testing.T) {
	cs := fake.NewClientset(apiPod("spin-test", spinUID, "node-a", spinCtr))
	ctx := t.Context()
	k, err := NewKubernetes(ctx, cs.CoreV1().Pods(""), "node-a", 10*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	notified := func(within time.Duration) bool {
		t.Helper()
		select {
		case <-k.Changes().C():
			return true
		case <-time.After(within):
			return false
		}
	}
	if !notified(time.Second) {
		t.Fatal("the first list did not notify")
	}
	pods := cs.CoreV1().Pods("default")
	p, err := pods.Get(ctx, "spin-test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
	if p, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if notified(500 * time.Millisecond) {
		t.Error("a status-only update notified")
	}
	p.Annotations = map[string]string{"cgwarden.io/cpu": "4"}
	if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !notified(10 * time.Second) {
		t.Fatal("a new size annotation did not notify")
	}
	if got, _ := k.Pods(ctx); len(got) != 1 || got[0].Annotation["cgwarden.io/cpu"] != "4" {
		t.Fatalf("after the notification, Pods = %+v", got)
	}
	if err := pods.Delete(ctx, "spin-test", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !notified(10 * time.Second) {
		t.Fatal("a deleted pod did not notify")
	}
	if got, _ := k.Pods(ctx); len(got) != 0 {
		t.Fatalf("after the deletion's notification, Pods = %+v", got)
	}
}
