package scale

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cgwarden/cgwarden/internal/certs"
	"github.com/cgwarden/cgwarden/internal/poll"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// sizerBinary builds ../../cmd/cgwarden-sizer, the sizer's own binary,
// once per test binary.
func sizerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cgwarden-scale-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "cgwarden-sizer")
		cmd := exec.Command("go", "build", "-o", builtBin, "./cmd/cgwarden-sizer")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building cgwarden-sizer: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// sizerProc is cgwarden-sizer running as ServiceAccount
// cgwarden-sizer/cgwarden-sizer (deploy/kustomize/sizer), resize
// controller on, no leader election (unless its flags say otherwise), with
// its own serving certificate.
type sizerProc struct {
	metricsURL string
	qps        float64
	// url is its HTTPS endpoint (https://127.0.0.1:PORT) and cert the PEM
	// certificate it serves, self-signed for 127.0.0.1: the caBundle of a
	// webhook configuration that calls it.
	url  string
	cert []byte
	// pid is the sizer's own process (in a memory cgroup, the wrapper
	// execs it: the same process).
	pid  int
	cmd  *exec.Cmd
	done chan struct{}
	// killed says the test sent SIGKILL itself (kill): any other death
	// by a signal is not the test's.
	killed bool
}

// sizerSpec is how to start one sizer.
type sizerSpec struct {
	// server is the API server the sizer is given, whose certificate ca
	// signs: a proxy in front of the lane's (empty: the lane's itself).
	server string
	ca     []byte
	qps    float64
	// args are added to the lane's flags (a later flag wins), env to the
	// test's environment (POD_NAME, the leader election identity).
	args []string
	env  []string
	// cgroup, if set, is the memory cgroup the sizer runs in from its
	// first instruction (a shell writes its own PID into the cgroup and
	// execs the sizer), with the environment the kubelet derives from
	// the container's memory limit (sizerLimitEnv: GOMEMLIMIT).
	cgroup *memcg
}

// startSizer starts the sizer with args added to its flags, and stops it
// at the end of the test.
func (e *env) startSizer(t *testing.T, qps float64, args ...string) *sizerProc {
	t.Helper()
	return e.runSizer(t, sizerSpec{qps: qps, args: args})
}

// startSizerVia is startSizer with the sizer's API server at server, whose
// certificate ca signs: a proxy in front of the lane's (empty: the lane's
// itself).
func (e *env) startSizerVia(t *testing.T, server string, ca []byte, qps float64, args ...string) *sizerProc {
	t.Helper()
	return e.runSizer(t, sizerSpec{server: server, ca: ca, qps: qps, args: args})
}

// runSizer starts a sizer as spec says, waits until it serves its
// metrics, and stops it at the end of the test (SIGINT, then SIGKILL after
// 10 s). Its log goes through a pipe to a file of the test's (so that the
// file's pages are not charged to the sizer's memory cgroup), and is
// printed when the test fails.
func (e *env) runSizer(t *testing.T, spec sizerSpec) *sizerProc {
	t.Helper()
	t0 := time.Now()
	dir := t.TempDir()
	rc := e.serviceAccountConfig(t, sizerNamespace, sizerSA)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["scale"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthority: rc.CAFile, CertificateAuthorityData: rc.CAData}
	if spec.server != "" {
		kc.Clusters["scale"] = &clientcmdapi.Cluster{Server: spec.server, CertificateAuthorityData: spec.ca}
	}
	kc.AuthInfos["sizer"] = &clientcmdapi.AuthInfo{Token: rc.BearerToken}
	kc.Contexts["scale"] = &clientcmdapi.Context{Cluster: "scale", AuthInfo: "sizer"}
	kc.CurrentContext = "scale"
	kubeconfig := filepath.Join(dir, "sizer.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	pair, err := certs.SelfSigned("cgwarden-sizer", []string{"127.0.0.1"}, time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pair.Cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pair.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	logPath := filepath.Join(dir, "sizer.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	flags := append([]string{"--kubeconfig", kubeconfig, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--tls-cert-file", certFile, "--tls-private-key-file", keyFile, "--leader-elect=false",
		"--kube-api-qps", fmt.Sprint(spec.qps), "--kube-api-burst", fmt.Sprint(int(2 * spec.qps))}, spec.args...)
	cmd := exec.Command(sizerBinary(t), flags...)
	if spec.cgroup != nil {
		// $0 is the sizer, "$@" its flags: the shell joins the cgroup
		// and becomes the sizer, so that everything the sizer ever
		// allocates is charged to the cgroup.
		cmd = exec.Command("/bin/sh", append([]string{"-c", `echo $$ > "$CGWARDEN_SCALE_CGROUP/cgroup.procs" && exec "$0" "$@"`, sizerBinary(t)}, flags...)...)
		// The binary's pages in the page cache, charged to the test's
		// own cgroup if they were not there: they are none of the
		// sizer's growth, and a cgroup that faulted them in would be
		// charged megabytes the next one is not.
		if _, err := os.ReadFile(sizerBinary(t)); err != nil {
			t.Fatal(err)
		}
		// And the environment the kubelet derives from the container's
		// memory limit (GOMEMLIMIT).
		spec.env = append(spec.env, "CGWARDEN_SCALE_CGROUP="+spec.cgroup.dir)
		spec.env = append(spec.env, sizerLimitEnv(t, spec.cgroup.limit)...)
	}
	cmd.Env = append(os.Environ(), spec.env...)
	// Not an *os.File: exec copies through a pipe.
	w := struct{ io.Writer }{logf}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &sizerProc{metricsURL: fmt.Sprintf("https://127.0.0.1:%d/metrics", port), qps: spec.qps,
		url: fmt.Sprintf("https://127.0.0.1:%d", port), cert: pair.Cert, pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.stop()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			t.Logf("sizer log (tail):\n%s", b)
		}
	})
	poll.Every(500*time.Millisecond).Until(t, 60*time.Second, "the sizer's resize controller running", func() (bool, string, error) {
		select {
		case <-s.done:
			b, _ := os.ReadFile(logPath)
			return false, "", fmt.Errorf("the sizer exited:\n%s", b)
		default:
		}
		m, err := httpsMetrics(context.Background(), s.metricsURL)
		if err != nil {
			return false, err.Error(), nil
		}
		// The controller's series appear once its informers synced and a
		// worker took the first key, or at once: the queue gauge is set
		// from the first Get; the resize counter exists from the start.
		_, ok := m["cgwarden_sizer_resizes_total"]
		return ok, "no cgwarden_sizer_resizes_total yet", nil
	})
	t.Logf("sizer (pid %d) serving in %v", s.pid, time.Since(t0).Round(time.Millisecond))
	return s
}

// stop ends the sizer as the kubelet would (SIGINT here; SIGKILL after 10
// s) and waits for it; it may be called again.
func (s *sizerProc) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// kill ends the sizer with SIGKILL, as a node's failure or an OOM kill
// would, and waits for it.
func (s *sizerProc) kill() {
	s.killed = true
	_ = s.cmd.Process.Kill()
	<-s.done
}

// alive says whether the sizer still runs, and if not, how it ended.
func (s *sizerProc) alive() (bool, string) {
	select {
	case <-s.done:
		return false, s.cmd.ProcessState.String()
	default:
		return true, ""
	}
}

func (s *sizerProc) metrics(t *testing.T) scrape {
	t.Helper()
	m, err := httpsMetrics(context.Background(), s.metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestMain removes the cgwarden-sizer binary built.
func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		_ = os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}
