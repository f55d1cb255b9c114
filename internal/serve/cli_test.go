package serve_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

const seedUID = "99afd520-5b3e-4c8d-8471-4b6c8ee26b4c"

func body(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	return string(b)
}

// The issue's acceptance, through the command itself: `cgwarden serve
// --snapshot example:seed-003-k3s-spin` serves the seed's pod with
// non-zero CPU on all three endpoints, while its pod cgroup reads zero.
func TestServeSnapshotCommand(t *testing.T) {
	url, cmd := startServe(t, "--snapshot", "example:seed-003-k3s-spin")

	res := body(t, url+"/metrics/resource")
	if !strings.Contains(res, `pod_cpu_usage_seconds_total{namespace="",pod="pod`+seedUID+`"} 26.392435 `) {
		t.Errorf("/metrics/resource:\n%s", res)
	}
	own := body(t, url+"/metrics")
	if !strings.Contains(own, `cgwarden_pod_cpu_usage_cores{namespace="",pod="pod`+seedUID+`",uid="`+seedUID+`"} 0.95`) ||
		!strings.Contains(own, `cgwarden_pod_cgroup_cpu_usage_seconds_total{namespace="",pod="pod`+seedUID+`",uid="`+seedUID+`"} 0`) {
		t.Errorf("/metrics lacks the pod's corrected CPU beside its raw cgroup's 0")
	}
	var sum statsapi.Summary
	if err := json.Unmarshal([]byte(body(t, url+"/stats/summary?only_cpu_and_memory=true")), &sum); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range sum.Pods {
		if p.PodRef.UID == seedUID {
			found = true
			if p.CPU == nil || p.CPU.UsageNanoCores == nil || *p.CPU.UsageNanoCores == 0 {
				t.Errorf("summary pod CPU %+v", p.CPU)
			}
		}
	}
	if !found {
		t.Error("seed pod missing from the summary")
	}

	// SIGTERM: a clean exit, promptly.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("no exit within 10 s of SIGTERM")
	}
}

func TestServeRefusesRemoteListenWithoutAllowRemote(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "serve", "--listen", "0.0.0.0:0", "--snapshot", "example:seed-003-k3s-spin")
	cmd.Env = append(os.Environ(), "CGWARDEN_RUN_CLI=1")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--allow-remote") {
		t.Fatalf("err %v, output %s", err, out)
	}
}
