package realtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// EnvRequireKubelet names the variable that turns "no kubelet here" into
// a failure. Only the node guest sets it (scripts/vmtest --node: its test
// unit's drop-in vmtest.service.d/node.conf), where containerd and a
// standalone kubelet with the systemd cgroup driver start with the boot
// and run the static pods of StaticPodDir.
const EnvRequireKubelet = "CGWARDEN_REQUIRE_KUBELET"

// The node guest's kubelet and runtime, at their default places
// (scripts/vmtest.d/systemd/node).
const (
	// KubeletURL is the kubelet's secure port (anonymous reads allowed:
	// there is no API server to authorize against).
	KubeletURL = "https://127.0.0.1:10250"
	// KubeletHealthz is the kubelet's plain-HTTP health endpoint.
	KubeletHealthz = "http://127.0.0.1:10248/healthz"
	// KubeletServingCert is the self-signed certificate (and its CA) the
	// kubelet makes at first start when given none.
	KubeletServingCert = "/var/lib/kubelet/pki/kubelet.crt"
	// ContainerdSocket is containerd's CRI socket.
	ContainerdSocket = "/run/containerd/containerd.sock"
	// StaticPodDir holds the static pods the kubelet runs.
	StaticPodDir = "/etc/kubernetes/manifests"
	// PodLogDir is where the kubelet keeps container logs
	// (<namespace>_<name>_<uid>/<container>/<restarts>.log).
	PodLogDir = "/var/log/pods"
)

// KubeletWait bounds the wait for the node guest's kubelet to answer and
// run its static pods: under TCG the guest's boot alone takes minutes.
const KubeletWait = 8 * time.Minute

// Kubelet is the node guest's kubelet, reached over its secure port.
type Kubelet struct {
	// NodeName is the kubelet's node name (the guest's hostname): the
	// suffix of its static pods' names, and its certificate's name.
	NodeName string
	client   *http.Client
}

// RequireSystemdKubelet skips t unless the node guest's kubelet is
// expected here (CGWARDEN_REQUIRE_KUBELET=1, set by scripts/vmtest --node
// alone); there it calls RequireSystemd and waits up to KubeletWait for
// containerd's socket, the kubelet's health endpoint and its serving
// certificate, and fails t (with the units' journal) if they do not come.
func RequireSystemdKubelet(t testing.TB) *Kubelet {
	t.Helper()
	if os.Getenv(EnvRequireKubelet) != "1" {
		t.Skipf("kubelet test skipped: it needs the node guest's containerd and kubelet (scripts/vmtest --node), where %s=1 makes this a failure", EnvRequireKubelet)
	}
	RequireSystemd(t)
	start := time.Now()
	deadline := start.Add(KubeletWait)
	var why string
	lastLog := start
	for {
		why = kubeletUnready()
		if why == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node's kubelet is not ready after %v: %s\n%s", KubeletWait, why, NodeJournal(60))
		}
		if time.Since(lastLog) > 30*time.Second {
			t.Logf("waiting for the node's kubelet (%.0fs): %s", time.Since(start).Seconds(), why)
			lastLog = time.Now()
		}
		time.Sleep(2 * time.Second)
	}
	k, err := newKubelet()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the node's kubelet answers (waited %.1fs; guest uptime %s)", time.Since(start).Seconds(), uptime())
	return k
}

// kubeletUnready says what the node still lacks, or "".
func kubeletUnready() string {
	if fi, err := os.Stat(ContainerdSocket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return "no containerd socket " + ContainerdSocket
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(KubeletHealthz)
	if err != nil {
		return "kubelet healthz: " + err.Error()
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("kubelet healthz: %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if _, err := os.Stat(KubeletServingCert); err != nil {
		return "no kubelet serving certificate: " + err.Error()
	}
	return ""
}

// newKubelet trusts the kubelet's self-signed certificate (the file holds
// the certificate and the CA that signed it) for the node's name, which
// is the only name in it.
func newKubelet() (*Kubelet, error) {
	pem, err := os.ReadFile(KubeletServingCert)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", KubeletServingCert)
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, err
	}
	host = strings.ToLower(host)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12},
		DialContext:     (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	return &Kubelet{NodeName: host, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, nil
}

// Get reads path from the kubelet; anything but 200 is an error.
func (k *Kubelet) Get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, KubeletURL+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kubelet %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("kubelet %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kubelet %s: %d %.300s", path, resp.StatusCode, body)
	}
	return body, nil
}

// KubeletPod is what the tests use of a pod of the kubelet's /pods (a
// few fields of a v1 Pod, decoded here so that realtest, which every
// live test links, does not pull in k8s.io/api).
type KubeletPod struct {
	Metadata struct {
		Name, Namespace, UID string
	} `json:"metadata"`
	Spec struct {
		Containers []struct {
			Name string `json:"name"`
		} `json:"containers"`
	} `json:"spec"`
	Status struct {
		Phase             string `json:"phase"`
		QOSClass          string `json:"qosClass"`
		ContainerStatuses []struct {
			Name        string `json:"name"`
			ContainerID string `json:"containerID"` // containerd://<id>
			State       struct {
				Running *struct {
					StartedAt time.Time `json:"startedAt"`
				} `json:"running"`
			} `json:"state"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

// Key is the pod's namespace/name.
func (p KubeletPod) Key() string { return p.Metadata.Namespace + "/" + p.Metadata.Name }

// Containers maps the IDs of the pod's containers (the runtime's, without
// the "containerd://" scheme) to their names.
func (p KubeletPod) Containers() map[string]string {
	out := map[string]string{}
	for _, c := range p.Status.ContainerStatuses {
		if _, id, ok := strings.Cut(c.ContainerID, "://"); ok {
			out[id] = c.Name
		}
	}
	return out
}

// Pods is the kubelet's /pods: its pods with their status (a standalone
// kubelet fills in its static pods' status there).
func (k *Kubelet) Pods(ctx context.Context) ([]KubeletPod, error) {
	b, err := k.Get(ctx, "/pods")
	if err != nil {
		return nil, err
	}
	var l struct {
		Items []KubeletPod `json:"items"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("kubelet /pods: %w", err)
	}
	return l.Items, nil
}

// StaticPodNames lists the pods of StaticPodDir by the names the kubelet
// gives them: <metadata.name>-<node name>, in namespace/name form.
func (k *Kubelet) StaticPodNames() ([]string, error) { return k.staticPodNames(StaticPodDir) }

func (k *Kubelet) staticPodNames(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		name, ns := yamlField(string(b), "name"), yamlField(string(b), "namespace")
		if name == "" {
			return nil, fmt.Errorf("%s: no metadata name", f)
		}
		if ns == "" {
			ns = "default"
		}
		out = append(out, ns+"/"+name+"-"+k.NodeName)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no static pods in %s", dir)
	}
	return out, nil
}

// yamlField is the value of the first two-space-indented "key:" line (a
// static pod's metadata field): enough for the guest's own manifests.
func yamlField(doc, key string) string {
	for _, l := range strings.Split(doc, "\n") {
		if v, ok := strings.CutPrefix(l, "  "+key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// WaitRunning waits until every one of want (namespace/name) is among the
// kubelet's pods with every container running, and returns the
// kubelet's pods then.
func (k *Kubelet) WaitRunning(t testing.TB, want []string, timeout time.Duration) []KubeletPod {
	t.Helper()
	start := time.Now()
	lastLog := start
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		pods, err := k.Pods(ctx)
		cancel()
		var why string
		if err != nil {
			why = err.Error()
		} else {
			why = notRunning(pods, want)
		}
		if why == "" {
			t.Logf("%d static pods running (waited %.1fs; guest uptime %s)", len(want), time.Since(start).Seconds(), uptime())
			return pods
		}
		if time.Since(start) > timeout {
			t.Fatalf("the kubelet's static pods are not all running after %v: %s\n%s", timeout, why, NodeJournal(60))
		}
		if time.Since(lastLog) > 30*time.Second {
			t.Logf("waiting for the static pods (%.0fs): %s", time.Since(start).Seconds(), why)
			lastLog = time.Now()
		}
		time.Sleep(2 * time.Second)
	}
}

func notRunning(pods []KubeletPod, want []string) string {
	byName := map[string]KubeletPod{}
	for _, p := range pods {
		byName[p.Key()] = p
	}
	var why []string
	for _, w := range want {
		p, ok := byName[w]
		switch {
		case !ok:
			why = append(why, w+" not listed")
		case len(p.Status.ContainerStatuses) != len(p.Spec.Containers):
			why = append(why, fmt.Sprintf("%s: phase %q, %d of %d container statuses", w, p.Status.Phase, len(p.Status.ContainerStatuses), len(p.Spec.Containers)))
		default:
			for _, c := range p.Status.ContainerStatuses {
				if c.State.Running == nil || c.ContainerID == "" {
					why = append(why, fmt.Sprintf("%s container %s not running", w, c.Name))
				}
			}
		}
	}
	return strings.Join(why, "; ")
}

// NodeJournal is the last n lines of the node's units' journal
// (containerd, the image import, the kubelet), for a failure message.
func NodeJournal(n int) string {
	out, err := exec.Command("journalctl", "--no-pager", "-o", "short-monotonic", "-n", fmt.Sprint(n),
		"-u", "containerd", "-u", "cgwarden-node-images", "-u", "kubelet").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(journalctl: %v) %s", err, out)
	}
	return "the node's journal, last lines:\n" + string(out)
}

func uptime() string {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0] + "s"
}
