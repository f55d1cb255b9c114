package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// TestAgentMisplacedSandboxIsNotAContainer: a pod whose sandbox (pause)
// cgroup the runtime puts outside the pod too (the misplace runtime with
// the cgwarden.io/misplace-sandbox annotation, as a runwasi-style shim
// can). The agent's /stats/summary lists the pod's declared container
// only, as the kubelet's does — not the sandbox under its 64-hex ID — and
// its /metrics/resource has container series for that container only;
// the pod's CPU, which the kubelet reads from the (emptied) pod cgroup as
// next to nothing, is the busy container's in the agent's figures.
func TestAgentMisplacedSandboxIsNotAContainer(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	importAgentImage(t)
	ns := e.namespace(t)
	class, one := misplaceClass, int64(1)
	p, err := e.cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sbx", Annotations: map[string]string{"cgwarden.io/misplace-sandbox": "true"}},
		Spec: corev1.PodSpec{HostNetwork: true, RuntimeClassName: &class, TerminationGracePeriodSeconds: &one,
			Containers: []corev1.Container{{Name: "main", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sh", "-c", burner}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 120*time.Second, "pod sbx running", func() (bool, string, error) {
		p, err = e.cs.CoreV1().Pods(ns).Get(ctx, "sbx", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return containerID(p) != "", describe(p), nil
	})

	// Both the container and the sandbox are literal cgroups at the root.
	root, _ := cgroupRoot()
	id := containerID(p)
	prefix := strings.TrimSuffix(literalName(string(p.UID), id), id)
	var sandbox string
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ents {
		if rest, ok := strings.CutPrefix(d.Name(), prefix); ok && rest != id {
			sandbox = rest
		}
	}
	if sandbox == "" || len(procs(root+"/"+prefix+id)) == 0 {
		t.Fatalf("the misplace runtime did not put both the sandbox and container %.12s of %s at the root (%s*)", id, p.Name, prefix)
	}
	t.Logf("sandbox %.12s and container %.12s both outside pod %s's cgroup", sandbox, id, p.Name)

	e.installAgent(t, "testdata/agent")
	agent := e.agentReader(t, ns)
	kubelet := e.kubeletClient(t)

	// The containers each lists for the pod.
	containers := func(get func(string) (int, string)) ([]string, error) {
		code, body := get("/stats/summary")
		if code != 200 {
			return nil, fmt.Errorf("/stats/summary: %d %.200s", code, body)
		}
		var sum struct {
			Pods []struct {
				PodRef     struct{ Name, Namespace string } `json:"podRef"`
				Containers []struct {
					Name string `json:"name"`
				} `json:"containers"`
			} `json:"pods"`
		}
		if err := json.Unmarshal([]byte(body), &sum); err != nil {
			return nil, err
		}
		for _, sp := range sum.Pods {
			if sp.PodRef.Namespace == ns && sp.PodRef.Name == "sbx" {
				var names []string
				for _, c := range sp.Containers {
					names = append(names, c.Name)
				}
				sort.Strings(names)
				return names, nil
			}
		}
		return nil, nil
	}
	var ours, theirs []string
	poll.Until(t, 60*time.Second, "pod sbx in the agent's and the kubelet's /stats/summary", func() (bool, string, error) {
		var err error
		if ours, err = containers(agent); err != nil {
			return false, "", err
		}
		if theirs, err = containers(kubelet); err != nil {
			return false, "", err
		}
		return ours != nil && theirs != nil, fmt.Sprintf("agent %v, kubelet %v", ours, theirs), nil
	})
	if !slices.Equal(ours, theirs) || !slices.Equal(ours, []string{"main"}) {
		t.Errorf("/stats/summary containers of sbx: agent %v, kubelet %v; want [main] from both (the sandbox %.12s is not a container)", ours, theirs, sandbox)
	}

	// /metrics/resource: container series of sbx name main only.
	code, body := agent("/metrics/resource")
	if code != 200 {
		t.Fatalf("agent /metrics/resource: %d %.200s", code, body)
	}
	var series []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "container_") && strings.Contains(l, `pod="sbx"`) && strings.Contains(l, `namespace="`+ns+`"`) {
			series = append(series, l)
			if !strings.Contains(l, `container="main"`) {
				t.Errorf("agent /metrics/resource serves a container of sbx that is not main: %s", l)
			}
		}
	}
	if len(series) == 0 {
		t.Errorf("agent /metrics/resource serves no container series of sbx")
	}

	// The pod's CPU: the kubelet's (its emptied pod cgroup) next to none,
	// the agent's the busy container's.
	poll.Until(t, 60*time.Second, "the agent's pod CPU of sbx above the kubelet's", func() (bool, string, error) {
		a, k := summaryCPU(t, agent, ns)["sbx"], summaryCPU(t, kubelet, ns)["sbx"]
		return a.pod > 0 && a.pod >= a.containers && a.pod > 10*max(k.pod, 1), fmt.Sprintf("agent pod %.0f (containers %.0f), kubelet pod %.0f nanocores", a.pod, a.containers, k.pod), nil
	})
}
